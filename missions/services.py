"""The one write path of missions: every page, API view and command that changes a mission
calls these, and nothing else writes a mission journal or its projection.

Each service

1. checks the person: an admin of the workspace creates a mission; any other change needs a
   role the person holds on that mission (``missions.roles``; ``PermissionDenied``), and the
   role they act in must be one of theirs;
2. builds the request with the person's account as its actor (never free text) and its id
   derived from the caller's idempotency key, so a double click or a resubmitted form is one
   decision (``Done.duplicate``; the same key for a different request is ``Invalid``);
3. refuses a request made from a stale page (``Stale``): ``seen_head`` is the mission's journal
   head the person saw; if what they act on (the mission, or that work package) moved since,
   they look again first;
4. asks the machine (``ephyra.core.mission``, through ``missions.decide``): a refusal is
   ``Refused`` with the machine's reason, and changes nothing;
5. journals the decision by compare-and-swap (``missions.journal``; a lost race reloads and
   decides again), then, in one database transaction under the workspace lock, brings the
   projection to the journal head and appends the audit entry (``mission.*``).

Git first, database second, as for quests: ``manage.py repair`` rebuilds what a crash between
the two left behind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pygit2
from django.db import transaction
from django.utils import timezone

from ephyra.core.events import SignalRef, SignalSensed
from ephyra.core.mission import (
    FINAL_MISSION_STATES,
    FINAL_WP_STATES,
    MISSION_TRANSITIONS,
    SUPERSEDE_EVIDENCE,
    WP_TRANSITIONS,
    MissionState,
    Role,
    WPState,
)
from ledger.audit import audit_append
from ledger.inbound import EventConflict, submit_event
from ledger.models import InboundEvent
from missions.decide import decide_request, links_after, move_of
from missions.evidence import Evidence, Staged, resolve
from missions.journal import MissionConflict, MissionJournal, Move, Snapshot, mission_journal
from missions.models import Mission, MissionRole, WorkPackage
from missions.projection import created_request, mission_number, sync_mission
from missions.roles import copy_roles, mission_roles, require_role
from quests.actions import Invalid, Refused, Stale
from quests.models import Quest, Workspace
from quests.projection import lock_workspace
from quests.roles import require

ATTEMPTS = 20  # lost races before giving up; people, not machines, write missions
TITLE_LIMIT = 200
NOTE_LIMIT = 4000
_PROBE = {"kind": "probe", "text": "probe"}  # stands for the evidence while the machine is asked
AUDIT_ACTIONS = {
    "create": "mission.created",
    "add_wp": "mission.wp_added",
    "mission": "mission.moved",
    "wp": "mission.wp_moved",
    "supersede_wp": "mission.wp_superseded",
    "supersede_mission": "mission.superseded",
    "link": "mission.wp_linked",
}


@dataclass(frozen=True)
class Done:
    """What came of a request: the mission's projection row after it, its journal head, and
    whether the request had been journaled before (the same key again: nothing new)."""

    mission: Mission
    head: str
    duplicate: bool = False


def request_id_for(workspace: Workspace, scope: str, key: str) -> str:
    """The request id of an idempotency key: the same key in the same scope (a mission, or
    the workspace for a creation) is the same request."""
    digest = hashlib.sha256(f"{workspace.pk}|{scope}|{key}".encode()).hexdigest()
    return f"mr-{digest[:24]}"


# --- creating missions -----------------------------------------------------------------------


def mission_create(user, workspace: Workspace, *, title: str, key: str) -> Done:
    """A new mission in CREATED, ``m<n>``; an admin of the workspace only, who becomes its
    lead (audited as ``mission.created`` and ``mission.role_granted``)."""
    require(user, workspace, "administer")
    title = _title(title)
    request_id = _request_id(workspace, "", key)

    def build(mission_id: str) -> tuple[dict, Any]:
        request = _base(user, "create", request_id, subject=mission_id, new_id=mission_id)
        return {**request, "title": title}, None

    def lead() -> None:
        MissionRole.objects.get_or_create(
            workspace=workspace,
            mission_id=done_id[0],
            user=user,
            role=Role.LEAD,
            defaults={"granted_by": user, "granted_at": timezone.now()},
        )
        audit_append(
            workspace,
            at=timezone.now(),
            actor=f"person:{user.get_username()}",
            action="mission.role_granted",
            object=f"mission:{done_id[0]}",
            payload={"account": user.get_username(), "role": "lead", "as": "creator"},
        )

    done_id: list[str] = []
    return _create(user, workspace, request_id, build, done_id, after=lead)


def mission_supersede(
    user, failed: Mission, *, title: str, role: str, evidence: Evidence, key: str
) -> Done:
    """A new mission in CREATED that supersedes the FAILED mission ``failed``, linked both
    ways; by a lead, human or higher of the failed mission, with ``failure_analysis`` as
    evidence. The failed mission's people get the same roles on the new one. A mission is
    superseded once."""
    workspace = failed.workspace
    parsed = _role_on(user, failed, role)
    title = _title(title)
    request_id = _request_id(workspace, failed.mission_id, key)
    journal = mission_journal(workspace)
    snapshot = journal.load(failed.mission_id)
    if snapshot is None:
        raise Invalid(f"mission {failed.mission_id} has no journal; run manage.py repair")
    later = Mission.objects.filter(workspace=workspace, supersedes=failed.mission_id).first()
    if later is not None and later.created_request != request_id:
        raise Refused(f"mission {failed.mission_id} is already superseded by {later.mission_id}")
    staged_item, staged = _staged(workspace, evidence)

    def build(mission_id: str) -> tuple[dict, Any]:
        request = _base(user, "supersede_mission", request_id, subject=failed.mission_id)
        request.update(new_id=mission_id, title=title, role=str(parsed))
        request["failed_head"] = str(snapshot.commit)
        request["evidence"] = {SUPERSEDE_EVIDENCE: _PROBE}
        probe = decide_request(None, request, failed=snapshot.mission)
        if not probe.accepted:
            raise Refused(probe.reason or "refused")
        item = staged_item or resolve(workspace, evidence)[0]
        request["evidence"] = {SUPERSEDE_EVIDENCE: item}
        return request, snapshot.mission

    done_id: list[str] = []
    try:
        done = _create(
            user,
            workspace,
            request_id,
            build,
            done_id,
            after=lambda: copy_roles(workspace, failed.mission_id, done_id[0]),
        )
    except BaseException:
        if staged:
            staged.discard()
        raise
    if staged and done.duplicate:
        staged.discard()
    elif staged:
        staged.keep()
    return done


def _create(user, workspace, request_id, build, done_id: list[str], *, after) -> Done:
    """Journal a new mission under the next free ``m<n>`` (a lost race takes the next
    number), then project and audit it. A request journaled before is answered as a
    duplicate, found by its id among the missions that have none or no projection yet."""
    journal = mission_journal(workspace)
    for _ in range(ATTEMPTS):
        earlier = _created_by(workspace, journal, request_id)
        if earlier is not None:
            return Done(earlier, earlier.journal_head, duplicate=True)
        number = max((mission_number(m) for m in journal.heads()), default=0) + 1
        mission_id = f"m{number}"
        request, failed = build(mission_id)
        decision = decide_request(None, request, failed)
        if not decision.accepted:
            raise Refused(decision.reason or "refused")
        move = move_of(None, decision.mission, request)
        try:
            head = journal.append(
                mission_id,
                None,
                mission=decision.mission,
                links={},
                request=request,
                move=move,
                revision=1,
            )
        except MissionConflict:
            continue
        done_id.append(mission_id)
        row = _project(workspace, journal, mission_id, user, request, move, head, after=after)
        return Done(row, str(head))
    raise Stale(f"other missions kept being created ({ATTEMPTS} tries); try again")


def _created_by(workspace: Workspace, journal: MissionJournal, request_id: str) -> Mission | None:
    row = Mission.objects.filter(workspace=workspace, created_request=request_id).first()
    if row is not None:
        return row
    rows = Mission.objects.filter(workspace=workspace)
    projected = set(rows.values_list("mission_id", flat=True))
    for mission_id, head in journal.heads().items():
        if mission_id not in projected and created_request(journal, head) == request_id:
            # Journaled, never projected (a crash, or a double click still on its way).
            with transaction.atomic():
                lock_workspace(workspace)
                sync_mission(workspace, journal, mission_id)
            return Mission.objects.get(workspace=workspace, mission_id=mission_id)
    return None


# --- changing a mission ----------------------------------------------------------------------


def wp_add(user, mission: Mission, *, title: str, key: str) -> Done:
    """Plan a new work package ``wp<n>`` in TODO; the mission's lead, while the mission is
    CREATED or PLANNING (the machine's rule)."""
    _role_on(user, mission, "lead")
    title = _title(title)

    def build(snapshot: Snapshot, request_id: str) -> tuple[dict, str]:
        new_id = f"wp{len(snapshot.mission.work_packages) + 1}"
        request = _base(user, "add_wp", request_id, subject=mission.mission_id, new_id=new_id)
        return {**request, "title": title, "role": "lead"}, ""

    what = {"kind": "add_wp", "title": title}
    return _change(user, mission, build, what, key=key, seen_head=None, subject="")


def mission_transition(
    user,
    mission: Mission,
    *,
    to: str,
    role: str,
    evidence: Evidence,
    note: str = "",
    expected: str | None = None,
    seen_head: str | None = None,
    key: str,
) -> Done:
    """Move the mission to ``to``, acting as ``role`` (one the person holds on it), with the
    evidence the transition requires. ``expected``: the state the person saw (the machine
    stops and asks a person when it differs); ``seen_head``: the journal head they saw."""
    parsed = _role_on(user, mission, role)
    note = _note(note)

    def build(snapshot: Snapshot, request_id: str) -> tuple[dict, str]:
        rule = MISSION_TRANSITIONS.get((snapshot.mission.state, _state(MissionState, to)))
        request = _base(user, "mission", request_id, subject=mission.mission_id)
        request.update(to=str(to), role=str(parsed), expected=expected, note=note)
        return request, rule.evidence if rule else "evidence"

    what = {"kind": "mission", "subject": mission.mission_id, "to": str(to), "role": str(parsed)}
    return _change(
        user, mission, build, what, key=key, seen_head=seen_head, subject=mission.mission_id,
        evidence=evidence,
    )  # fmt: skip


def wp_transition(
    user,
    mission: Mission,
    wp_id: str,
    *,
    to: str,
    role: str,
    evidence: Evidence,
    note: str = "",
    expected: str | None = None,
    seen_head: str | None = None,
    key: str,
) -> Done:
    """Move work package ``wp_id`` to ``to``, as ``mission_transition`` moves the mission.
    For IN_PROGRESS -> CHECKING the evidence may be the proof of the quest carrying it
    (``Evidence("proof")``); for a failure, the quest's state (``Evidence("quest")``)."""
    parsed = _role_on(user, mission, role)
    note = _note(note)

    def build(snapshot: Snapshot, request_id: str) -> tuple[dict, str]:
        wp = snapshot.mission.work_packages.get(wp_id)
        rule = wp and WP_TRANSITIONS.get((wp.state, _state(WPState, to)))
        request = _base(user, "wp", request_id, subject=wp_id)
        request.update(to=str(to), role=str(parsed), expected=expected, note=note)
        return request, rule.evidence if rule else "evidence"

    what = {"kind": "wp", "subject": wp_id, "to": str(to), "role": str(parsed)}
    return _change(
        user, mission, build, what, key=key, seen_head=seen_head, subject=wp_id,
        evidence=evidence,
    )  # fmt: skip


def wp_supersede(
    user,
    mission: Mission,
    wp_id: str,
    *,
    title: str,
    role: str,
    evidence: Evidence,
    seen_head: str | None = None,
    key: str,
) -> Done:
    """Replace the FAILED work package ``wp_id`` by a new one in TODO that links back to it;
    by a lead, human or higher of the mission, with ``failure_analysis`` as evidence."""
    parsed = _role_on(user, mission, role)
    title = _title(title)

    def build(snapshot: Snapshot, request_id: str) -> tuple[dict, str]:
        new_id = f"wp{len(snapshot.mission.work_packages) + 1}"
        request = _base(user, "supersede_wp", request_id, subject=wp_id, new_id=new_id)
        request.update(title=title, role=str(parsed))
        return request, SUPERSEDE_EVIDENCE

    what = {"kind": "supersede_wp", "subject": wp_id, "role": str(parsed), "title": title}
    return _change(
        user, mission, build, what, key=key, seen_head=seen_head, subject=wp_id,
        evidence=evidence,
    )  # fmt: skip


def wp_link_quest(
    user,
    mission: Mission,
    wp_id: str,
    *,
    quest_id: str = "",
    seen_head: str | None = None,
    key: str,
) -> Done:
    """Name the quest that carries work package ``wp_id``: an existing quest of the workspace
    (``quest_id``), or, with ``quest_id`` empty, a new quest opened for it (a signal the
    workspace's worker turns into the quest ``<mission>-<wp>``, which the policy triages like
    any other). The mission's lead only. A work package that is DONE or FAILED keeps its quest;
    a quest carries one open work package at a time."""
    workspace = mission.workspace
    _role_on(user, mission, "lead")
    quest_id = (quest_id or "").strip()
    if quest_id:
        _check_carrier(workspace, mission, wp_id, quest_id)

    def build(snapshot: Snapshot, request_id: str) -> tuple[dict, str]:
        wp = snapshot.mission.work_packages.get(wp_id)
        if wp is None:
            raise Refused(f"state unclear: unknown work package '{wp_id}'; stop and ask a human")
        if snapshot.mission.state in FINAL_MISSION_STATES:
            raise Refused(f"the mission is {snapshot.mission.state.name}, which is final")
        if wp.state in FINAL_WP_STATES:
            raise Refused(f"{wp_id} is {wp.state.name}: the quest that carried it stays linked")
        carrier = quest_id or _open_quest(user, workspace, mission.mission_id, wp, request_id)
        request = _base(user, "link", request_id, subject=wp_id)
        request.update(role="lead", quest=carrier, quest_created=not quest_id)
        return request, ""

    what = {"kind": "link", "subject": wp_id, "quest_created": not quest_id}
    if quest_id:
        what["quest"] = quest_id
    return _change(user, mission, build, what, key=key, seen_head=seen_head, subject=wp_id)


def _check_carrier(workspace: Workspace, mission: Mission, wp_id: str, quest_id: str) -> None:
    if not Quest.objects.filter(workspace=workspace, quest_id=quest_id).exists():
        raise Invalid(f"there is no quest {quest_id!r} in {workspace.slug}")
    other = (
        WorkPackage.objects.filter(mission__workspace=workspace, quest_id=quest_id)
        .exclude(state__in=[str(s) for s in FINAL_WP_STATES])
        .exclude(mission=mission, wp_id=wp_id)
        .select_related("mission")
        .first()
    )
    if other is not None:
        raise Refused(
            f"quest {quest_id} already carries {other.wp_id} of {other.mission.mission_id}"
        )


def _open_quest(user, workspace: Workspace, mission_id: str, wp, request_id: str) -> str:
    """Submit the signal that opens a new quest for the work package; the quest's id. The same
    request again finds the signal it submitted (a crash before the link was journaled)."""
    event_id = f"sensed-{request_id[3:]}"
    earlier = InboundEvent.objects.filter(workspace=workspace, event_id=event_id).first()
    if earlier is not None:
        return earlier.quest_id
    base = f"{mission_id}-{wp.wp_id}"
    quest_id, n = base, 1
    while (
        Quest.objects.filter(workspace=workspace, quest_id=quest_id).exists()
        or InboundEvent.objects.filter(workspace=workspace, quest_id=quest_id).exists()
    ):
        n += 1
        quest_id = f"{base}-{n}"
    event = SignalSensed(
        id=event_id,
        quest=quest_id,
        at=timezone.now(),
        actor=user.get_username(),
        signal=SignalRef(
            id=f"mission-{request_id[3:]}",
            fingerprint=f"mission:{mission_id}:{wp.wp_id}",
            title=wp.title,
        ),
    )
    try:
        submit_event(workspace, event, source=f"person:{user.get_username()}")
    except EventConflict as exc:
        raise Invalid(str(exc)) from None
    return quest_id


def _change(
    user,
    mission: Mission,
    build: Callable[[Snapshot, str], tuple[dict, str]],
    what: dict[str, Any],
    *,
    key: str,
    seen_head: str | None,
    subject: str,
    evidence: Evidence | None = None,
) -> Done:
    """Decide and journal a request on an existing mission (the loop every change shares):
    a duplicate is answered first, then a stale page, then the machine with the evidence
    standing in (so a forbidden move is refused with the machine's reason before any evidence
    is looked at), then the evidence, then the machine for real; a lost race starts over."""
    workspace, mission_id = mission.workspace, mission.mission_id
    request_id = _request_id(workspace, mission_id, key)
    journal = mission_journal(workspace)
    staged_item, staged = _staged(workspace, evidence) if evidence else (None, None)
    try:
        for _ in range(ATTEMPTS):
            snapshot = journal.load(mission_id)
            if snapshot is None:
                raise Invalid(f"mission {mission_id} has no journal; run manage.py repair")
            earlier = _journaled(journal, snapshot.commit, request_id)
            if earlier is not None:
                if any(earlier.request.get(k) != v for k, v in what.items()):
                    raise Invalid(
                        "this idempotency key was used for a different request on this "
                        "mission; reload the page and try again"
                    )
                if staged:
                    staged.discard()
                with transaction.atomic():  # in case a crash left it unprojected
                    lock_workspace(workspace)
                    sync_mission(workspace, journal, mission_id)
                row = Mission.objects.get(workspace=workspace, mission_id=mission_id)
                return Done(row, str(earlier.commit), duplicate=True)
            _check_seen(journal, snapshot, seen_head, subject)
            request, name = build(snapshot, request_id)
            if evidence is not None:
                request["evidence"] = {name: _PROBE}
            decision = decide_request(snapshot.mission, request)
            if not decision.accepted:
                raise Refused(decision.reason or "refused")
            if evidence is not None:
                quest = snapshot.links.get(request.get("subject", ""), "")
                item = staged_item or resolve(workspace, evidence, quest_id=quest)[0]
                request["evidence"] = {name: item}
                decision = decide_request(snapshot.mission, request)
                if not decision.accepted:
                    raise Refused(decision.reason or "refused")
            move = move_of(snapshot.mission, decision.mission, request)
            try:
                head = journal.append(
                    mission_id,
                    snapshot.commit,
                    mission=decision.mission,
                    links=links_after(snapshot.links, request),
                    request=request,
                    move=move,
                    revision=snapshot.revision + 1,
                )
            except MissionConflict:
                continue
            break
        else:
            raise Stale(f"mission {mission_id} kept moving ({ATTEMPTS} tries); look again")
    except BaseException:
        if staged:
            staged.discard()
        raise
    if staged:
        staged.keep()
    row = _project(workspace, journal, mission_id, user, request, move, head)
    return Done(row, str(head))


def _journaled(journal: MissionJournal, head: pygit2.Oid, request_id: str) -> Snapshot | None:
    for oid in journal.commits(head):
        snapshot = journal.at(oid)
        if snapshot.request.get("request_id") == request_id:
            return snapshot
    return None


def _check_seen(journal: MissionJournal, snapshot: Snapshot, seen: str | None, subject: str):
    """``Stale`` when ``subject`` moved after the head the person saw (or that head is not in
    the mission's history at all); other work packages moving meanwhile do not matter."""
    if not seen or seen == str(snapshot.commit):
        return
    try:
        moved = journal.subjects_since(snapshot.commit, pygit2.Oid(hex=seen))
    except ValueError:
        moved = None
    if moved is not None and subject not in moved:
        return
    mission = snapshot.mission
    wp = mission.work_packages.get(subject)
    now = f"{subject} is {wp.state.name}" if wp else f"the mission is {mission.state.name}"
    raise Stale(
        f"{mission.mission_id} moved on since you saw it ({now}, revision {snapshot.revision}): "
        "look again before you act"
    )


def _project(workspace, journal, mission_id, user, request, move: Move, head, *, after=None):
    with transaction.atomic():
        lock_workspace(workspace)
        sync_mission(workspace, journal, mission_id)
        audit_append(
            workspace,
            at=datetime.fromisoformat(request["at"]),
            actor=f"person:{user.get_username()}",
            action=AUDIT_ACTIONS[request["kind"]],
            object=f"mission:{mission_id}",
            payload={
                "request": request["request_id"],
                "subject": move.subject,
                "from": move.before,
                "to": move.after,
                "role": request.get("role", ""),
                "evidence": {
                    name: {**item, "text": item["text"][:200]}
                    for name, item in request.get("evidence", {}).items()
                },
                "journal_head": str(head),
                **{k: request[k] for k in ("new_id", "quest") if k in request},
            },
        )
        if after is not None:
            after()
    return Mission.objects.select_related("workspace").get(
        workspace=workspace, mission_id=mission_id
    )


def _staged(workspace: Workspace, evidence: Evidence | None) -> tuple[dict | None, Staged | None]:
    """An uploaded file is hashed and staged once, before the loop (its item does not depend
    on the mission); the other kinds are read when the machine has accepted the move."""
    if evidence is None or evidence.kind != "file":
        return None, None
    return resolve(workspace, evidence)


def _role_on(user, mission: Mission, role: str) -> Role:
    """``role`` parsed, if the person holds it on the mission and may use it now."""
    held = mission_roles(user, mission.workspace, mission.mission_id)
    return require_role(held, role, mission.mission_id)


def _base(user, kind: str, request_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "request_id": request_id,
        "actor": user.get_username(),
        "account": user.pk,
        "at": timezone.now().isoformat(),
        **fields,
    }


def _request_id(workspace: Workspace, scope: str, key: str) -> str:
    if not key or len(key) > 200:
        raise Invalid("a request needs an idempotency key of 1 to 200 characters")
    return request_id_for(workspace, scope, key)


def _state(kind, value: str):
    try:
        return kind(str(value).strip().lower())
    except ValueError:
        return None


def _title(title: str) -> str:
    title = " ".join((title or "").split())
    if not title:
        raise Invalid("a title is required")
    if len(title) > TITLE_LIMIT:
        raise Invalid(f"the title is {len(title)} characters; at most {TITLE_LIMIT}")
    return title


def _note(note: str) -> str:
    note = (note or "").strip()
    if len(note) > NOTE_LIMIT:
        raise Invalid(f"the note is {len(note)} characters; at most {NOTE_LIMIT}")
    return note
