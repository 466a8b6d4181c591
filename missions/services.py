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

from typing import Any

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
from missions.decide import decide_request
from missions.evidence import Evidence, resolve
from missions.journal import Snapshot, mission_journal
from missions.models import Mission, MissionRole, WorkPackage
from missions.roles import copy_roles
from missions.writing import (
    NOTE_LIMIT,
    PROBE,
    TITLE_LIMIT,
    Done,
    base_request,
    change,
    clean_note,
    clean_title,
    create_mission,
    parse_state,
    request_id_for,
    request_key,
    role_on,
    staged_file,
)
from quests.actions import Invalid, Refused
from quests.models import Quest, Workspace
from quests.roles import require

__all__ = [
    "NOTE_LIMIT",
    "TITLE_LIMIT",
    "Done",
    "mission_create",
    "mission_supersede",
    "mission_transition",
    "request_id_for",
    "wp_add",
    "wp_link_quest",
    "wp_supersede",
    "wp_transition",
]


def mission_create(user, workspace: Workspace, *, title: str, key: str) -> Done:
    """A new mission in CREATED, ``m<n>``; an admin of the workspace only, who becomes its
    lead (audited as ``mission.created`` and ``mission.role_granted``)."""
    require(user, workspace, "administer")
    title = clean_title(title)
    request_id = request_key(workspace, "", key)

    def build(mission_id: str) -> tuple[dict, Any]:
        request = base_request(user, "create", request_id, subject=mission_id, new_id=mission_id)
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
    return create_mission(user, workspace, request_id, build, done_id, after=lead)


def mission_supersede(
    user, failed: Mission, *, title: str, role: str, evidence: Evidence, key: str
) -> Done:
    """A new mission in CREATED that supersedes the FAILED mission ``failed``, linked both
    ways; by a lead, human or higher of the failed mission, with ``failure_analysis`` as
    evidence. The failed mission's people get the same roles on the new one. A mission is
    superseded once."""
    workspace = failed.workspace
    parsed = role_on(user, failed, role)
    title = clean_title(title)
    request_id = request_key(workspace, failed.mission_id, key)
    journal = mission_journal(workspace)
    snapshot = journal.load(failed.mission_id)
    if snapshot is None:
        raise Invalid(f"mission {failed.mission_id} has no journal; run manage.py repair")
    later = Mission.objects.filter(workspace=workspace, supersedes=failed.mission_id).first()
    if later is not None and later.created_request != request_id:
        raise Refused(f"mission {failed.mission_id} is already superseded by {later.mission_id}")
    staged_item, staged = staged_file(workspace, evidence)

    def build(mission_id: str) -> tuple[dict, Any]:
        request = base_request(user, "supersede_mission", request_id, subject=failed.mission_id)
        request.update(new_id=mission_id, title=title, role=str(parsed))
        request["failed_head"] = str(snapshot.commit)
        request["evidence"] = {SUPERSEDE_EVIDENCE: PROBE}
        probe = decide_request(None, request, failed=snapshot.mission)
        if not probe.accepted:
            raise Refused(probe.reason or "refused")
        item = staged_item or resolve(workspace, evidence)[0]
        request["evidence"] = {SUPERSEDE_EVIDENCE: item}
        return request, snapshot.mission

    done_id: list[str] = []
    try:
        done = create_mission(
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


def wp_add(user, mission: Mission, *, title: str, key: str) -> Done:
    """Plan a new work package ``wp<n>`` in TODO; the mission's lead, while the mission is
    CREATED or PLANNING (the machine's rule)."""
    role_on(user, mission, "lead")
    title = clean_title(title)

    def build(snapshot: Snapshot, request_id: str) -> tuple[dict, str]:
        new_id = f"wp{len(snapshot.mission.work_packages) + 1}"
        request = base_request(
            user, "add_wp", request_id, subject=mission.mission_id, new_id=new_id
        )
        return {**request, "title": title, "role": "lead"}, ""

    what = {"kind": "add_wp", "title": title}
    return change(user, mission, build, what, key=key, seen_head=None, subject="")


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
    parsed = role_on(user, mission, role)
    note = clean_note(note)

    def build(snapshot: Snapshot, request_id: str) -> tuple[dict, str]:
        rule = MISSION_TRANSITIONS.get((snapshot.mission.state, parse_state(MissionState, to)))
        request = base_request(user, "mission", request_id, subject=mission.mission_id)
        request.update(to=str(to), role=str(parsed), expected=expected, note=note)
        return request, rule.evidence if rule else "evidence"

    what = {"kind": "mission", "subject": mission.mission_id, "to": str(to), "role": str(parsed)}
    return change(
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
    parsed = role_on(user, mission, role)
    note = clean_note(note)

    def build(snapshot: Snapshot, request_id: str) -> tuple[dict, str]:
        wp = snapshot.mission.work_packages.get(wp_id)
        rule = wp and WP_TRANSITIONS.get((wp.state, parse_state(WPState, to)))
        request = base_request(user, "wp", request_id, subject=wp_id)
        request.update(to=str(to), role=str(parsed), expected=expected, note=note)
        return request, rule.evidence if rule else "evidence"

    what = {"kind": "wp", "subject": wp_id, "to": str(to), "role": str(parsed)}
    return change(
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
    parsed = role_on(user, mission, role)
    title = clean_title(title)

    def build(snapshot: Snapshot, request_id: str) -> tuple[dict, str]:
        new_id = f"wp{len(snapshot.mission.work_packages) + 1}"
        request = base_request(user, "supersede_wp", request_id, subject=wp_id, new_id=new_id)
        request.update(title=title, role=str(parsed))
        return request, SUPERSEDE_EVIDENCE

    what = {"kind": "supersede_wp", "subject": wp_id, "role": str(parsed), "title": title}
    return change(
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
    role_on(user, mission, "lead")
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
        request = base_request(user, "link", request_id, subject=wp_id)
        request.update(role="lead", quest=carrier, quest_created=not quest_id)
        return request, ""

    what = {"kind": "link", "subject": wp_id, "quest_created": not quest_id}
    if quest_id:
        what["quest"] = quest_id
    return change(user, mission, build, what, key=key, seen_head=seen_head, subject=wp_id)


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
