"""The projection of a mission journal: its ``Mission`` row and a ``WorkPackage`` row per WP.

``sync_mission`` brings a mission's rows to its journal head, whatever they held before: the
services call it after each journal write, repair for every mission. It reads the head when it
is called, under the workspace lock the caller holds, so two writers that each call it after
their own commit leave the rows at the newer head; rows never move backwards because the
journal does not.
"""

from __future__ import annotations

from typing import Any

from missions.journal import MissionJournal, Snapshot, mission_to_dict
from missions.models import Mission, WorkPackage
from quests.models import Workspace


def mission_number(mission_id: str) -> int:
    """The n of ``m<n>`` (0 for an id of another form, written by hand)."""
    digits = mission_id[1:]
    return int(digits) if mission_id.startswith("m") and digits.isdigit() else 0


def mission_fields(snapshot: Snapshot, created_request: str) -> dict[str, Any]:
    """The ``Mission`` row of a mission at a journal commit, by field name."""
    mission = snapshot.mission
    return {
        "number": mission_number(mission.mission_id),
        "title": mission.title,
        "state": str(mission.state),
        "supersedes": mission.supersedes or "",
        "revision": snapshot.revision,
        "attempts": len(mission.ledger),
        "created_request": created_request,
        "created_at": mission.created_at,
        "updated_at": mission.updated_at,
        "journal_head": str(snapshot.commit),
        "data": {**mission_to_dict(mission), "quests": snapshot.links},
    }


def wp_fields(snapshot: Snapshot) -> dict[str, dict[str, Any]]:
    """The ``WorkPackage`` rows of a mission at a journal commit, by WP id."""
    return {
        wp.wp_id: {
            "position": position,
            "title": wp.title,
            "state": str(wp.state),
            "supersedes": wp.supersedes or "",
            "quest_id": snapshot.links.get(wp.wp_id, ""),
            "makers": list(wp.makers),
            "checker": wp.checker or "",
        }
        for position, wp in enumerate(snapshot.mission.work_packages.values(), 1)
    }


def created_request(journal: MissionJournal, head) -> str:
    """The id of the request that created the mission (its first commit's)."""
    *_, first = journal.commits(head)
    return str(journal.at(first).request["request_id"])


def sync_mission(workspace: Workspace, journal: MissionJournal, mission_id: str) -> str | None:
    """Bring the mission's rows to its journal head, every field compared (a row edited by
    hand is put back too): "created", "updated", or None when they were right already (or the
    mission has no journal). Call under the workspace lock."""
    snapshot = journal.load(mission_id)
    if snapshot is None:
        return None
    fields = mission_fields(snapshot, created_request(journal, snapshot.commit))
    row = Mission.objects.filter(workspace=workspace, mission_id=mission_id).first()
    if row is None:
        row = Mission.objects.create(workspace=workspace, mission_id=mission_id, **fields)
        _sync_wps(row, wp_fields(snapshot))
        return "created"
    changed = [name for name, value in fields.items() if getattr(row, name) != value]
    for name in changed:
        setattr(row, name, fields[name])
    if changed:
        row.save(update_fields=changed)
    moved = _sync_wps(row, wp_fields(snapshot))
    return "updated" if changed or moved else None


def _sync_wps(row: Mission, wanted: dict[str, dict[str, Any]]) -> bool:
    """Make the mission's WP rows ``wanted``; whether any changed."""
    have = {wp.wp_id: wp for wp in WorkPackage.objects.filter(mission=row)}
    create, update = [], []
    for wp_id, fields in wanted.items():
        wp = have.pop(wp_id, None)
        if wp is None:
            create.append(WorkPackage(mission=row, wp_id=wp_id, **fields))
        elif any(getattr(wp, name) != value for name, value in fields.items()):
            for name, value in fields.items():
                setattr(wp, name, value)
            update.append(wp)
    if create:
        WorkPackage.objects.bulk_create(create)
    if update:
        WorkPackage.objects.bulk_update(update, list(next(iter(wanted.values()))))
    if have:  # a row the journal does not have: a hand edit of the database
        WorkPackage.objects.filter(pk__in=[wp.pk for wp in have.values()]).delete()
    return bool(create or update or have)
