"""What a person does to a quest: claim, release, decide a checkpoint, comment, pause, resume,
kill, record a revision of the patch; and, for an admin, settle a ledger operation.

Every page, API view, command and test that acts for a person calls these; nothing else builds
a reviewer's event. Each action

1. checks the person's role in the workspace (``quests.roles``; ``PermissionDenied``);
2. builds the event with the person's account as its actor (never free text), its id derived
   from the caller's idempotency key, so a double click or a resubmitted form is one event;
3. refuses a quest that moved since the person looked (``Stale``): the action carries the
   journal head the person saw, checked here and again by the worker right before it applies
   the event, so it is never applied to a newer state;
4. asks the machine first (``Refused`` with its reason), then queues the event for the
   workspace's worker, the one writer (``ledger.inbound``), and can wait for its outcome.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from ephyra.core import events as ev
from ephyra.core.machine import decide
from ephyra.core.quest import Quest as QuestValue
from ledger.inbound import EventConflict, submit_event, submit_resolution, wait_for
from ledger.models import InboundEvent, Operation
from quests.models import Quest, Workspace
from quests.roles import require
from quests.workspaces import workspace_policy

COMMENT_LIMIT = 4000  # characters; the event's own limit, said before it is reached


class ActionError(Exception):
    """An action that was not taken, and why, in words for the person."""


class Refused(ActionError):
    """The machine refuses the event in the quest's present state."""


class Stale(ActionError):
    """The quest moved on since the person saw it."""


class Invalid(ActionError):
    """The person's input cannot make an event (an empty comment, one too long)."""


@dataclass(frozen=True)
class Seen:
    """What the person saw: the quest's journal head (and its revision, for the message)."""

    head: str
    revision: int


@dataclass
class Submitted:
    """An event queued for the worker. ``state`` is pending until the worker applies it
    (applied) or refuses it (refused, with ``reason``)."""

    event: ev.BaseEvent
    row: InboundEvent

    @property
    def state(self) -> str:
        return self.row.state

    @property
    def reason(self) -> str:
        return self.row.result.get("reason") or self.row.result.get("error", "")

    def wait(self, timeout: float, interval: float = 0.05) -> Submitted:
        """Wait up to ``timeout`` seconds for the worker's answer; the row as it then is."""
        wait_for(self.row, timeout, interval)
        return self


def quest_claim(user, quest: Quest, *, seen: Seen, key: str) -> Submitted:
    """Hold the quest's review: while held, only this person acts on it (comments still work)."""
    return _act(user, quest, "claim", ev.Claimed, {}, seen=seen, key=key)


def quest_release(user, quest: Quest, *, seen: Seen, key: str) -> Submitted:
    return _act(user, quest, "release", ev.Released, {}, seen=seen, key=key)


def checkpoint_decide(
    user,
    quest: Quest,
    *,
    checkpoint: str,
    verdict: str,
    comment: str = "",
    seen: Seen,
    key: str,
) -> Submitted:
    """Approve, revise or reject at checkpoint A, B or C. Revise and reject need a comment."""
    comment = _text(comment, "comment", required=verdict in {"revise", "reject"})
    fields = {"checkpoint": checkpoint, "verdict": verdict, "comment": comment}
    return _act(user, quest, "decide", ev.CheckpointDecided, fields, seen=seen, key=key)


def quest_comment(user, quest: Quest, *, body: str, key: str) -> Submitted:
    """A comment: always allowed, whoever holds the review and whatever the quest's state."""
    fields = {"body": _text(body, "comment", required=True)}
    return _act(user, quest, "comment", ev.CommentAdded, fields, seen=None, key=key)


def quest_pause(user, quest: Quest, *, reason: str = "", seen: Seen, key: str) -> Submitted:
    fields = {"reason": _text(reason, "reason") or "paused by a person"}
    return _act(user, quest, "pause", ev.Paused, fields, seen=seen, key=key)


def quest_resume(user, quest: Quest, *, seen: Seen, key: str) -> Submitted:
    return _act(user, quest, "resume", ev.Resumed, {}, seen=seen, key=key)


def quest_kill(user, quest: Quest, *, reason: str, seen: Seen, key: str) -> Submitted:
    fields = {"reason": _text(reason, "reason", required=True)}
    return _act(user, quest, "kill", ev.Killed, fields, seen=seen, key=key)


def human_revision_record(user, quest: Quest, *, head: str, seen: Seen, key: str) -> Submitted:
    """A person pushed their own revision of the patch: proof runs again for ``head``."""
    return _act(user, quest, "revise", ev.HumanRevision, {"head": head}, seen=seen, key=key)


QUEST_ACTIONS = ("claim", "release", "decide", "comment", "pause", "resume", "kill")


def quest_act(
    user, quest: Quest, action: str, *, seen: Seen, key: str,
    checkpoint: str = "", verdict: str = "", text: str = "",
) -> Submitted:  # fmt: skip
    """One of ``QUEST_ACTIONS`` by name, for the pages and the API that take it from a form
    or a URL: ``text`` is the comment, the decision's comment, or the reason to pause or kill."""
    if action == "claim":
        return quest_claim(user, quest, seen=seen, key=key)
    if action == "release":
        return quest_release(user, quest, seen=seen, key=key)
    if action == "decide":
        return checkpoint_decide(
            user, quest, checkpoint=checkpoint, verdict=verdict, comment=text, seen=seen, key=key
        )
    if action == "comment":
        return quest_comment(user, quest, body=text, key=key)
    if action == "pause":
        return quest_pause(user, quest, reason=text, seen=seen, key=key)
    if action == "resume":
        return quest_resume(user, quest, seen=seen, key=key)
    if action == "kill":
        return quest_kill(user, quest, reason=text, seen=seen, key=key)
    raise Invalid(f"no action {action!r}; one of {', '.join(QUEST_ACTIONS)}")


RESOLUTIONS = ("succeeded", "failed", "absent")
# Operations that wait for a person's verdict: a write whose outcome is unknown, a job that
# kept failing. The worker refuses any other (worker.delivery.resolve_by_person).
RESOLVABLE = (Operation.State.AMBIGUOUS, Operation.State.DEAD)


@dataclass
class Resolution:
    """A person's verdict on an operation, queued for the worker. ``outcome`` is applied,
    queued (the worker has not answered yet) or refused (with ``reason``)."""

    operation: Operation
    verdict: str
    row: InboundEvent

    @property
    def outcome(self) -> str:
        return {"applied": "applied", "pending": "queued"}.get(self.row.state, "refused")

    @property
    def reason(self) -> str:
        return self.row.result.get("reason") or self.row.result.get("error", "")

    @property
    def state(self) -> str:
        """The operation's state after the worker applied the verdict ("" before)."""
        return self.row.result.get("state", "")


def operation_resolve(user, op: Operation, *, verdict: str, note: str, key: str) -> Resolution:
    """Settle an ambiguous or dead operation: it landed (``succeeded``), it did not and must
    not be tried again (``failed``), or it did not and may be delivered again (``absent``).

    An admin of the operation's workspace only (``PermissionDenied``); the note is required.
    The verdict is queued for the workspace's worker, which applies and audits it
    (``operation.resolved``, the account as its actor); this waits up to
    ``EPHYRA_ACTION_WAIT_MS`` for the worker's answer. The same ``key`` again returns the first
    answer, so a double click resolves once; an operation in any other state is ``Refused``."""
    workspace = op.workspace
    require(user, workspace, "administer")
    if verdict not in RESOLUTIONS:
        raise Invalid(f"a verdict is succeeded, failed or absent, not {verdict!r}")
    note = _text(note, "note", required=True)
    if not key or len(key) > 200:
        raise Invalid("an action needs an idempotency key of 1 to 200 characters")
    actor = user.get_username()
    digest = hashlib.sha256(f"{workspace.pk}|{op.key}|{key}".encode()).hexdigest()
    event_id = f"resolve-{digest[:24]}"
    payload = {"key": op.key, "status": verdict, "actor": actor, "note": note}
    row = InboundEvent.objects.filter(workspace=workspace, event_id=event_id).first()
    if row is not None and row.payload != payload:
        raise Invalid(
            "this idempotency key was used for a different resolution; "
            "reload the page and try again"
        )
    if row is None:
        if op.state not in RESOLVABLE:
            raise Refused(f"{op.key} is {op.state}; only ambiguous or dead operations are resolved")
        row = submit_resolution(
            workspace, op.key, verdict, actor=actor, note=note, event_id=event_id
        )
    wait_for(row, settings.EPHYRA_ACTION_WAIT_MS / 1000)
    return Resolution(op, verdict, row)


def event_id_for(workspace: Workspace, quest_id: str, key: str) -> str:
    """The event id of an action: the same key gives the same event, so it applies once."""
    digest = hashlib.sha256(f"{workspace.pk}|{quest_id}|{key}".encode()).hexdigest()
    return f"act-{digest[:24]}"


def _text(value: str, name: str, *, required: bool = False) -> str:
    value = (value or "").strip()
    if required and not value:
        raise Invalid(f"a {name} is required")
    if len(value) > COMMENT_LIMIT:
        raise Invalid(f"the {name} is {len(value)} characters; at most {COMMENT_LIMIT}")
    return value


def _act(
    user,
    quest: Quest,
    action: str,
    event_class: type[ev.BaseEvent],
    fields: dict,
    *,
    seen: Seen | None,
    key: str,
) -> Submitted:
    workspace = quest.workspace
    require(user, workspace, action)
    if not key or len(key) > 200:
        raise Invalid("an action needs an idempotency key of 1 to 200 characters")
    try:
        event = event_class(
            id=event_id_for(workspace, quest.quest_id, key),
            quest=quest.quest_id,
            at=timezone.now(),
            actor=user.get_username(),
            **fields,
        )
    except ValueError as exc:  # pydantic: a value the event does not take
        raise Invalid(_first_error(exc)) from None
    earlier = InboundEvent.objects.filter(workspace=workspace, event_id=event.id).first()
    if earlier is not None:
        # The same action again (a double click, a resubmitted form): its first answer.
        return _same_or_conflict(event, earlier)
    if seen is not None and seen.head != quest.journal_head:
        raise Stale(
            f"the quest moved on since you saw it (revision {seen.revision}, {seen.head[:12]}); "
            f"it is now {quest.state} at revision {quest.revision}: look again before you act"
        )
    decision = decide(QuestValue.from_dict(quest.data), event, workspace_policy(workspace))
    if not decision.accepted:
        raise Refused(decision.reason or decision.outcome)
    try:
        row = submit_event(
            workspace,
            event,
            source=f"person:{user.get_username()}",
            expect_head=seen.head if seen is not None else "",
        )
    except EventConflict as exc:
        raise Invalid(str(exc)) from None
    return Submitted(event, row)


def _same_or_conflict(event: ev.BaseEvent, earlier: InboundEvent) -> Submitted:
    def content(data: dict) -> dict:
        return {k: v for k, v in data.items() if k != "at"}

    if content(earlier.payload) != content(ev.event_to_dict(event)):
        raise Invalid(
            "this idempotency key was used for a different action on this quest; "
            "reload the page and try again"
        )
    return Submitted(ev.parse_event(earlier.payload), earlier)


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        return f"{where}: {first.get('msg', 'invalid')}" if where else first.get("msg", str(exc))
    return str(exc)
