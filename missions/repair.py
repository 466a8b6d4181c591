"""Repair of the mission projections from the mission journals.

The services write Git first and the database second; a crash between the two leaves a mission
row behind its journal (or missing). ``repair_missions`` reads every mission head of a
workspace and brings each mission's rows to it (``missions.projection.sync_mission``, every
field compared), and audits what it changed as ``mission.repaired``. Running it twice changes
nothing the second time. ``manage.py repair`` calls it for every workspace it repairs, through
the app's ``repair_workspace`` hook (``missions.apps``).

People's mission roles are not projections (they are not in the journal): repair never touches
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from ledger.audit import audit_append
from missions.journal import mission_journal
from missions.projection import sync_mission
from quests.models import Workspace
from quests.projection import lock_workspace


@dataclass
class MissionRepair:
    """What repair found: missions checked, and the ids of those it created or updated."""

    missions: int = 0
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated)

    def summary(self) -> str:
        if not self.missions:
            return ""
        return (
            f"missions: {self.missions} checked; {len(self.created)} projections created, "
            f"{len(self.updated)} updated"
        )

    def lines(self) -> list[str]:
        return [f"  mission created: {m}" for m in self.created] + [
            f"  mission updated: {m}" for m in self.updated
        ]


def repair_missions(workspace: Workspace, report: MissionRepair | None = None) -> MissionRepair:
    """Bring every mission of ``workspace`` to its journal head, in one transaction under the
    workspace lock (missions are few and small); audit what changed."""
    report = report or MissionRepair()
    journal = mission_journal(workspace)
    with transaction.atomic():
        lock_workspace(workspace)
        created, updated = [], []
        for mission_id in sorted(journal.heads()):
            report.missions += 1
            outcome = sync_mission(workspace, journal, mission_id)
            if outcome == "created":
                created.append(mission_id)
            elif outcome == "updated":
                updated.append(mission_id)
        if created or updated:
            audit_append(
                workspace,
                at=timezone.now(),
                actor="ephyra:repair",
                action="mission.repaired",
                object=f"workspace:{workspace.slug}",
                payload={"created": created, "updated": updated},
            )
    report.created += created
    report.updated += updated
    return report
