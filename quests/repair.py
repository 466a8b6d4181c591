"""Repair: rebuild what the database lacks from the Git journals.

Git is written first, the database second, so after a crash the journal may hold transitions
the database never saw. Repair reads every journal head, rewrites projections that differ from
it, and inserts ledger rows for journaled effects the ledger lacks — never touching rows that
exist, whatever their state. Running it twice changes nothing the second time.

What keeps it fast: a projection row and the ledger rows of its transition are written in one
transaction, so a row at journal head H means every effect up to H is in the ledger. Repair
therefore reads only the commits after the row's head (all of them when the row is missing),
and the engine calls ``repair_quest`` itself when it finds the row behind the commit it builds on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from journal.store import Journal
from ledger.audit import audit_append
from ledger.models import Operation
from quests.models import Quest, Workspace
from quests.services import projection_fields, workspace_journal

BATCH = 500


@dataclass
class RepairReport:
    workspaces: int = 0
    quests: int = 0
    projections_created: list[str] = field(default_factory=list)
    projections_updated: list[str] = field(default_factory=list)
    operations_created: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.projections_created or self.projections_updated or self.operations_created)

    def summary(self) -> str:
        return (
            f"repair: {self.workspaces} workspaces, {self.quests} quests checked; "
            f"{len(self.projections_created)} projections created, "
            f"{len(self.projections_updated)} updated, "
            f"{len(self.operations_created)} ledger operations restored"
        )


@dataclass
class _Batch:
    creates: list[Quest] = field(default_factory=list)
    updates: list[Quest] = field(default_factory=list)
    operations: list[Operation] = field(default_factory=list)
    fields: list[str] = field(default_factory=list)


def _check_quest(
    workspace: Workspace,
    journal: Journal,
    quest_id: str,
    row: Quest | None,
    batch: _Batch,
    report: RepairReport,
) -> None:
    quest, head = journal.load(quest_id)
    if quest is None or head is None:
        return
    report.quests += 1
    known_head = None if row is None else row.journal_head
    wanted = projection_fields(quest, str(head))
    batch.fields = list(wanted)
    if row is None:
        batch.creates.append(Quest(workspace=workspace, quest_id=quest_id, **wanted))
        report.projections_created.append(quest_id)
    elif any(getattr(row, name) != value for name, value in wanted.items()):
        for name, value in wanted.items():
            setattr(row, name, value)
        batch.updates.append(row)
        report.projections_updated.append(quest_id)
    if known_head == str(head):
        return
    for oid in journal.commits(head):
        if str(oid) == known_head:
            break
        batch.operations.extend(
            Operation(
                key=effect["key"],
                workspace=workspace,
                quest_id=quest_id,
                type=effect["type"],
                payload=effect["payload"],
                journal_commit=str(oid),
            )
            for effect in journal.entry(oid).effects
        )


def _write(batch: _Batch, report: RepairReport) -> None:
    known = _known_keys([op.key for op in batch.operations]) if batch.operations else set()
    missing = [op for op in batch.operations if op.key not in known]
    report.operations_created.extend(sorted(op.key for op in missing))
    # No savepoint: inside the engine's transaction a savepoint is two round trips for nothing.
    with transaction.atomic(savepoint=False):
        if batch.creates:
            Quest.objects.bulk_create(batch.creates, batch_size=BATCH)
        if len(batch.updates) == 1:  # the engine's case: one row, one plain UPDATE
            row = batch.updates[0]
            Quest.objects.filter(pk=row.pk).update(**{f: getattr(row, f) for f in batch.fields})
        elif batch.updates:
            Quest.objects.bulk_update(batch.updates, batch.fields, batch_size=BATCH)
        if missing:
            Operation.objects.bulk_create(missing, batch_size=BATCH, ignore_conflicts=True)


def repair_quest(
    workspace: Workspace, quest_id: str, journal: Journal | None = None
) -> RepairReport:
    """Bring one quest's projection and ledger rows up to its journal head."""
    report = RepairReport(workspaces=1)
    batch = _Batch()
    row = Quest.objects.filter(workspace=workspace, quest_id=quest_id).first()
    _check_quest(workspace, journal or workspace_journal(workspace), quest_id, row, batch, report)
    _write(batch, report)
    return report


def repair_workspace(workspace: Workspace, report: RepairReport | None = None) -> RepairReport:
    """Repair every quest of a workspace; what it changed is audited as ``quest.repaired``."""
    report = report or RepairReport()
    done_before = (len(report.projections_created), len(report.projections_updated))
    ops_before = len(report.operations_created)
    report.workspaces += 1
    journal = workspace_journal(workspace)
    rows = {q.quest_id: q for q in Quest.objects.filter(workspace=workspace)}
    batch = _Batch()
    for quest_id in journal.quest_ids():
        _check_quest(workspace, journal, quest_id, rows.get(quest_id), batch, report)
        if len(batch.creates) + len(batch.updates) >= BATCH:
            _write(batch, report)
            batch = _Batch()
    _write(batch, report)
    repaired = (
        report.projections_created[done_before[0] :] + report.projections_updated[done_before[1] :]
    )
    restored = report.operations_created[ops_before:]
    if repaired or restored:
        with transaction.atomic():
            Workspace.objects.select_for_update().filter(pk=workspace.pk).first()
            audit_append(
                workspace,
                at=timezone.now(),
                actor="ephyra:repair",
                action="quest.repaired",
                object=f"workspace:{workspace.slug}",
                payload={"projections": sorted(repaired), "operations": restored},
            )
    return report


def _known_keys(keys: list[str]) -> set[str]:
    known: set[str] = set()
    for start in range(0, len(keys), BATCH):
        chunk = keys[start : start + BATCH]
        known.update(Operation.objects.filter(key__in=chunk).values_list("key", flat=True))
    return known


def repair_all() -> RepairReport:
    report = RepairReport()
    for workspace in Workspace.objects.order_by("slug"):
        repair_workspace(workspace, report)
    return report
