"""Delivering effects once: claim, call the adapter under the ledger key, record, feed back.

Every step that changes state runs in its own transaction that starts with ``fence_check``, so a
worker that lost its lease changes nothing. The order of the steps is what makes a crash safe:

1. **claim** (pending → started, fenced; the delivery counter rises);
2. **call** the adapter with the ledger key as its idempotency key;
3. **record** the outcome, with the events it produced (succeeded or failed; an exception from a
   write leaves it **ambiguous**, never retried automatically);
4. **feed back** each event through the engine, counting the ones taken in the same transaction
   as the engine's projection, so a restart feeds exactly the rest.

A crash after 1 leaves a started operation with no outcome. Its next worker finds it orphaned:
a read or computation goes back to pending (dead once the counter passes the limit); a write
becomes ambiguous, and the adapter's ``check`` or a person resolves it (``reconcile``).

The rows' own steps (claim, record, supersede, settle) are the ledger's (``ledger.operations``);
this module is the part that calls adapters and the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pygit2
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ephyra.compose import effect_adapters
from ephyra.core.effects import STANDING_EFFECTS, EffectType
from ephyra.core.events import BaseEvent, event_to_dict, parse_event
from ephyra.core.ports import (
    ClaimLost,
    EffectFailed,
    EffectRequest,
    EffectResult,
    retry_safe,
)
from ledger.audit import audit_append
from ledger.lease import Fence, LeaseLost, fence_check
from ledger.models import Operation
from ledger.operations import finish, finish_many, holds_claim, settle, take_over
from quests.engine import Outcome, quest_apply
from quests.models import Quest, Workspace
from quests.workspaces import workspace_journal
from worker import faults

log = logging.getLogger(__name__)
State = Operation.State


@dataclass
class Counts:
    delivered: int = 0
    succeeded: int = 0
    failed: int = 0
    ambiguous: int = 0
    dead: int = 0
    retried: int = 0
    superseded: int = 0
    events: int = 0
    inbound: int = 0

    def add(self, other: Counts) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def fenced_apply(
    fence: Fence,
    workspace: Workspace,
    event: BaseEvent,
    *,
    then: Callable[[Outcome], None] | None = None,
) -> Outcome:
    """The engine under the lease: the fence's row lock is held across the journal write and
    the projection, so no other generation can write in between. ``then`` runs in the same
    transaction as the projection (to count an event as taken, say)."""
    with transaction.atomic():
        fence_check(fence)
        outcome = quest_apply(workspace, event, after_journal=lambda: faults.reach("after_journal"))
        if then is not None:
            then(outcome)
    return outcome


def _request(workspace: Workspace, op: Operation, fence: Fence | None = None) -> EffectRequest:
    return EffectRequest(
        key=op.key,
        type=EffectType(op.type),
        workspace=workspace.slug,
        quest_id=op.quest_id,
        payload=op.payload,
        attempt=op.attempts,
        generation=fence.generation if fence else 0,
        still_holder=(lambda: holds_claim(fence, op)) if fence else (lambda: True),
    )


def _result_outcome(result: EffectResult) -> dict:
    return {
        "status": result.status,
        "detail": result.detail,
        "events": [event_to_dict(event) for event in result.events],
    }


_UNREAD = object()


def is_current(
    workspace: Workspace, op: Operation, row: tuple[str, str] | object | None = _UNREAD
) -> tuple[bool, str]:
    """Does the quest still ask for this effect? Yes while it has not changed state since the
    transition that asked: a later state (killed, revised, parked) supersedes the request.
    A standing effect (``STANDING_EFFECTS``) stays current once asked for.
    ``row`` is the quest's (journal head, state) when the caller read it already."""
    if row is _UNREAD:
        row = (
            Quest.objects.filter(workspace=workspace, quest_id=op.quest_id)
            .values_list("journal_head", "state")
            .first()
        )
    if row is None:
        return False, "the quest has no projection"
    if EffectType(op.type) in STANDING_EFFECTS:
        return True, ""
    head, state = row
    if head == op.journal_commit:
        return True, ""
    journal = workspace_journal(workspace)
    # Every transition from the one that asked up to the head must have left the state alone.
    for oid in journal.commits(pygit2.Oid(hex=head)):
        if str(oid) != head and str(journal.quest_at(oid).state) != state:
            break
        if str(oid) == op.journal_commit:
            return True, ""
    return False, f"the quest moved on to {state} since it asked"


def heads(workspace: Workspace, ops: list[Operation]) -> dict[str, tuple[str, str]]:
    """(journal head, state) of the quests of ``ops``, in one query, for ``is_current``."""
    rows = Quest.objects.filter(workspace=workspace, quest_id__in={op.quest_id for op in ops})
    return {
        quest: (head, state)
        for quest, head, state in rows.values_list("quest_id", "journal_head", "state")
    }


def _record(fence: Fence, op: Operation, state: str, outcome: dict, **extra) -> bool:
    """``ledger.operations.finish``, auditing an operation that became ambiguous or dead: those
    wait for a person, who should find out from the audit trail how they got there."""
    then = None
    if state in {State.AMBIGUOUS, State.DEAD}:
        then = lambda: _audit(op, f"operation.{state}", outcome)  # noqa: E731
    return finish(fence, op, state, outcome, then=then, **extra)


def _audit(op: Operation, action: str, payload: dict, actor: str = "ephyra") -> None:
    workspace = Workspace.objects.select_for_update().get(pk=op.workspace_id)
    audit_append(
        workspace,
        at=timezone.now(),
        actor=actor,
        action=action,
        object=f"operation:{op.key}",
        payload={"type": op.type, "quest": op.quest_id, **payload},
    )


def runs_long(op: Operation) -> bool:
    """Whether the operation's adapter runs as a job (``worker.jobs``), off the loop."""
    adapter = effect_adapters().get(EffectType(op.type))
    return bool(getattr(adapter, "runs_long", False))


def job_request(fence: Fence, workspace: Workspace, op: Operation) -> EffectRequest:
    return _request(workspace, op, fence)


def job_done(fence: Fence, op: Operation, outcome: EffectResult | BaseException) -> Counts:
    """Record what a job came to, as ``deliver`` records what an adapter returned; the loop
    feeds the events back later (``feed_back``), the job never does."""
    if isinstance(outcome, EffectFailed):
        outcome = EffectResult("failed", {"error": str(outcome)})
    if isinstance(outcome, BaseException):
        log.warning("job %s raised", op.key, exc_info=outcome)
        return _after_exception(fence, op, f"{type(outcome).__name__}: {outcome}")
    if not _record(fence, op, outcome.status, _result_outcome(outcome)):
        return Counts(delivered=1)
    return Counts(delivered=1, **{outcome.status: 1})


def deliver(fence: Fence, workspace: Workspace, op: Operation) -> Counts:
    """Deliver one claimed operation and feed its events back."""
    counts = Counts(delivered=1)
    adapter = effect_adapters()[EffectType(op.type)]
    request = _request(workspace, op, fence)
    faults.reach("after_claim")
    if not retry_safe(request.type) and not request.still_holder():
        raise LeaseLost(f"{op.key}: the claim was lost before the write was sent")
    try:
        result = adapter.run(request)
    except ClaimLost:
        raise LeaseLost(f"{op.key}: the claim was lost before the write was sent") from None
    except EffectFailed as exc:
        result = EffectResult("failed", {"error": str(exc)})
    except Exception as exc:  # the adapter's own failure: what happened outside is unknown
        log.warning("effect %s raised", op.key, exc_info=True)
        counts = _after_exception(fence, op, f"{type(exc).__name__}: {exc}")
        if op.state == State.AMBIGUOUS:
            # Reconciled at once where the adapter can look (did the push land?); a person
            # settles what it cannot tell.
            counts.add(check_ambiguous(fence, workspace, op))
        return counts
    faults.reach("after_call", f"{op.type} {op.key}")
    if not _record(fence, op, result.status, _result_outcome(result)):
        return counts
    setattr(counts, result.status, 1)
    faults.reach("after_outcome")
    counts.events = feed_back(fence, workspace, op)
    return counts


def deliver_batch(fence: Fence, workspace: Workspace, ops: list[Operation]) -> Counts:
    """Deliver claimed retry-safe operations: call each adapter, record the outcomes in one
    fenced transaction, then feed their events back one by one."""
    counts = Counts()
    results: list[tuple[Operation, EffectResult]] = []
    for op in ops:
        adapter = effect_adapters()[EffectType(op.type)]
        faults.reach("after_claim")
        try:
            result = adapter.run(_request(workspace, op, fence))
        except ClaimLost:
            raise LeaseLost(f"{op.key}: the claim was lost") from None
        except EffectFailed as exc:
            result = EffectResult("failed", {"error": str(exc)})
        except Exception as exc:
            log.warning("effect %s raised", op.key, exc_info=True)
            counts.add(_after_exception(fence, op, f"{type(exc).__name__}: {exc}"))
            continue
        faults.reach("after_call", f"{op.type} {op.key}")
        results.append((op, result))
    status = {op.pk: result.status for op, result in results}
    recorded = finish_many(fence, [(op, r.status, _result_outcome(r)) for op, r in results])
    for op in recorded:
        counts.delivered += 1
        setattr(counts, status[op.pk], getattr(counts, status[op.pk]) + 1)
        faults.reach("after_outcome")
        counts.events += feed_back(fence, workspace, op)
    return counts


def _after_exception(fence: Fence, op: Operation, error: str) -> Counts:
    if not retry_safe(EffectType(op.type)):
        _record(fence, op, State.AMBIGUOUS, {"error": error})
        return Counts(delivered=1, ambiguous=1)
    if op.attempts >= settings.EPHYRA_MAX_DELIVERIES:
        _record(fence, op, State.DEAD, {"error": error, "attempts": op.attempts})
        return Counts(delivered=1, dead=1)
    delay = settings.EPHYRA_RETRY_SECONDS * 2 ** (op.attempts - 1)
    _record(
        fence,
        op,
        State.PENDING,
        {"error": error},
        due_at=timezone.now() + timedelta(seconds=delay),
        owner="",
    )
    return Counts(delivered=1, retried=1)


def feed_back(fence: Fence, workspace: Workspace, op: Operation) -> int:
    """Give the engine the events of a recorded outcome that it has not taken yet."""
    events = [parse_event(data) for data in op.outcome.get("events", [])]
    fed = 0
    for index in range(op.events_applied, len(events)):

        def taken(_: Outcome, pk=op.pk) -> None:
            Operation.objects.filter(pk=pk).update(events_applied=F("events_applied") + 1)

        fenced_apply(fence, workspace, events[index], then=taken)
        fed += 1
    op.events_applied = len(events)
    return fed


def recover(fence: Fence, workspace: Workspace) -> Counts:
    """On taking a lease: settle what earlier owners left. Started operations of another claim
    are orphaned; recorded outcomes whose events were not all fed back are fed now."""
    counts = Counts()
    orphans = Operation.objects.filter(workspace=workspace, state=State.STARTED).exclude(
        owner=fence.owner, generation=fence.generation
    )
    for op in orphans.order_by("id"):
        counts.add(_orphaned(fence, workspace, op))
    unfed = Operation.objects.filter(
        workspace=workspace, state__in=[State.SUCCEEDED, State.FAILED]
    ).order_by("id")
    for op in unfed.iterator():
        if op.events_applied < len(op.outcome.get("events", [])):
            counts.events += feed_back(fence, workspace, op)
    return counts


def _orphaned(fence: Fence, workspace: Workspace, op: Operation) -> Counts:
    note = {"error": f"worker {op.owner} (generation {op.generation}) stopped before an outcome"}
    # Take the claim over first, so the outcome below is recorded under this worker's fence.
    take_over(fence, op)
    if retry_safe(EffectType(op.type)):
        if op.attempts >= settings.EPHYRA_MAX_DELIVERIES:
            _record(fence, op, State.DEAD, {**note, "attempts": op.attempts})
            return Counts(dead=1)
        _record(fence, op, State.PENDING, note, owner="")
        return Counts(retried=1)
    _record(fence, op, State.AMBIGUOUS, note)
    counts = Counts(ambiguous=1)
    counts.add(check_ambiguous(fence, workspace, op))
    return counts


def check_ambiguous(fence: Fence, workspace: Workspace, op: Operation) -> Counts:
    """Ask the adapter whether an ambiguous write landed. It stays ambiguous if nobody can tell."""
    adapter = effect_adapters().get(EffectType(op.type))
    if adapter is None:
        return Counts()
    try:
        result = adapter.check(_request(workspace, op))
    except Exception:
        log.warning("checking %s raised", op.key, exc_info=True)
        return Counts()
    if result is None:
        return Counts()
    resolve(fence, workspace, op, result, actor="ephyra:check")
    return Counts(ambiguous=-1, **{"retried" if result.status == "absent" else result.status: 1})


def resolve(
    fence: Fence, workspace: Workspace, op: Operation, result: EffectResult, *, actor: str
) -> None:
    """Settle an ambiguous or dead operation (by a check or a person), audited, then feed back.
    ``absent`` (it certainly did not happen) sends it back to pending for a fresh delivery."""
    was = op.state
    outcome = {**_result_outcome(result), "resolved_by": actor, "was": was}
    audit = {"was": was, "now": result.status}
    then = lambda: _audit(op, "operation.resolved", audit, actor)  # noqa: E731
    settle(fence, op, result.status, outcome, then=then)
    if result.status != "absent":
        feed_back(fence, workspace, op)


def resolve_by_person(
    fence: Fence, workspace: Workspace, key: str, status: str, *, actor: str, note: str = ""
) -> Operation:
    """A person settles an ambiguous or dead operation: it landed, it did not, or deliver it
    again (``absent``). Refused for an operation in any other state."""
    op = Operation.objects.filter(workspace=workspace, key=key).first()
    if op is None:
        raise ValueError(f"no operation {key} in {workspace.slug}")
    if op.state not in {State.AMBIGUOUS, State.DEAD}:
        raise ValueError(f"{key} is {op.state}; only ambiguous or dead operations are resolved")
    resolve(fence, workspace, op, EffectResult(status, {"note": note}), actor=actor)  # type: ignore[arg-type]
    op.refresh_from_db()
    return op
