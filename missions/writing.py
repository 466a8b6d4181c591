"""The machinery every mission write shares (``missions.services`` is the API): decide a
request with the machine, journal it by compare-and-swap, answer a duplicate or a stale page,
then project and audit in one transaction. Its docstrings say each step's contract."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pygit2
from django.db import transaction
from django.utils import timezone

from ephyra.core.mission import Role
from ledger.audit import audit_append
from missions.decide import decide_request, links_after, move_of
from missions.evidence import Evidence, Staged, resolve
from missions.journal import MissionConflict, MissionJournal, Move, Snapshot, mission_journal
from missions.models import Mission
from missions.projection import created_request, mission_number, sync_mission
from missions.roles import mission_roles, require_role
from quests.actions import Invalid, Refused, Stale
from quests.models import Workspace
from quests.projection import lock_workspace

ATTEMPTS = 20  # lost races before giving up; people, not machines, write missions
TITLE_LIMIT = 200
NOTE_LIMIT = 4000
PROBE = {"kind": "probe", "text": "probe"}  # stands for the evidence while the machine is asked
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


def create_mission(user, workspace, request_id, build, done_id: list[str], *, after) -> Done:
    """Journal a new mission under the next free ``m<n>`` (a lost race takes the next
    number), then project and audit it. A request journaled before is answered as a
    duplicate, found by its id among the missions that have none or no projection yet."""
    journal = mission_journal(workspace)
    for _ in range(ATTEMPTS):
        earlier = created_by(workspace, journal, request_id)
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
        row = project(workspace, journal, mission_id, user, request, move, head, after=after)
        return Done(row, str(head))
    raise Stale(f"other missions kept being created ({ATTEMPTS} tries); try again")


def created_by(workspace: Workspace, journal: MissionJournal, request_id: str) -> Mission | None:
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


def change(
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
    request_id = request_key(workspace, mission_id, key)
    journal = mission_journal(workspace)
    staged_item, staged = staged_file(workspace, evidence) if evidence else (None, None)
    try:
        for _ in range(ATTEMPTS):
            snapshot = journal.load(mission_id)
            if snapshot is None:
                raise Invalid(f"mission {mission_id} has no journal; run manage.py repair")
            earlier = journaled(journal, snapshot.commit, request_id)
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
            check_seen(journal, snapshot, seen_head, subject)
            request, name = build(snapshot, request_id)
            if evidence is not None:
                request["evidence"] = {name: PROBE}
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
    row = project(workspace, journal, mission_id, user, request, move, head)
    return Done(row, str(head))


def journaled(journal: MissionJournal, head: pygit2.Oid, request_id: str) -> Snapshot | None:
    for oid in journal.commits(head):
        snapshot = journal.at(oid)
        if snapshot.request.get("request_id") == request_id:
            return snapshot
    return None


def check_seen(journal: MissionJournal, snapshot: Snapshot, seen: str | None, subject: str):
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


def project(workspace, journal, mission_id, user, request, move: Move, head, *, after=None):
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


def staged_file(
    workspace: Workspace, evidence: Evidence | None
) -> tuple[dict | None, Staged | None]:
    """An uploaded file is hashed and staged once, before the loop (its item does not depend
    on the mission); the other kinds are read when the machine has accepted the move."""
    if evidence is None or evidence.kind != "file":
        return None, None
    return resolve(workspace, evidence)


def role_on(user, mission: Mission, role: str) -> Role:
    """``role`` parsed, if the person holds it on the mission and may use it now."""
    held = mission_roles(user, mission.workspace, mission.mission_id)
    return require_role(held, role, mission.mission_id)


def base_request(user, kind: str, request_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "request_id": request_id,
        "actor": user.get_username(),
        "account": user.pk,
        "at": timezone.now().isoformat(),
        **fields,
    }


def request_key(workspace: Workspace, scope: str, key: str) -> str:
    if not key or len(key) > 200:
        raise Invalid("a request needs an idempotency key of 1 to 200 characters")
    return request_id_for(workspace, scope, key)


def parse_state(kind, value: str):
    try:
        return kind(str(value).strip().lower())
    except ValueError:
        return None


def clean_title(title: str) -> str:
    title = " ".join((title or "").split())
    if not title:
        raise Invalid("a title is required")
    if len(title) > TITLE_LIMIT:
        raise Invalid(f"the title is {len(title)} characters; at most {TITLE_LIMIT}")
    return title


def clean_note(note: str) -> str:
    note = (note or "").strip()
    if len(note) > NOTE_LIMIT:
        raise Invalid(f"the note is {len(note)} characters; at most {NOTE_LIMIT}")
    return note
