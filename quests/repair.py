"""Repair: rebuild what the database lacks from the Git journals.

Git is written first, the database second, so after a crash the journal may hold transitions
the database never saw. Repair reads every journal head, rewrites projections that differ from
it, and inserts ledger rows for journaled effects the ledger lacks — never touching rows that
exist, whatever their state. Running it twice changes nothing the second time.

What keeps it fast: a projection row and the ledger rows of its transition are written in one
transaction, so a row at journal head H means every effect up to H is in the ledger. Repair
therefore reads only the commits after the row's head (all of them when the row is missing),
and the engine calls ``repair_quest`` itself when it finds the row behind the commit it builds on.
A workspace is repaired in batches of quests; each batch is written in one transaction under
the workspace lock the engine takes, after one query for what the engine wrote meanwhile and
one for the ledger keys that exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pygit2
from django.db import connection, transaction
from django.utils import timezone

from ephyra.core.ports import outcome_event_id
from ephyra.sql import insert_rows
from journal.format import read_json
from journal.store import Journal
from ledger.audit import audit_append
from ledger.models import Operation
from quests.models import Quest, Workspace
from quests.projection import lock_workspace, projection_of
from quests.workspaces import workspace_journal

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
    """What a batch of quests needs written; rows as values by field name."""

    creates: dict[str, dict] = field(default_factory=dict)  # quest id -> projection
    updates: dict[str, tuple[int, str, dict]] = field(default_factory=dict)  # (pk, head, proj.)
    operations: list[dict] = field(default_factory=list)
    # The ids of the events read, across the workspace: an operation whose outcome events are
    # among them was delivered before the database lost it (``_settled``).
    events: set[str] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.creates) + len(self.updates)


def _check_quest(
    journal: Journal,
    quest_id: str,
    head: pygit2.Oid,
    row: dict | None,
    batch: _Batch,
    report: RepairReport,
) -> None:
    """Compare one quest's projection row (its values, or None) with its journal head and
    queue what differs; queue the ledger rows of every commit after the row's head."""
    report.quests += 1
    known_head = None if row is None else row["journal_head"]
    at_head = known_head == str(head)
    read = journal.since(head, head if at_head else _oid(known_head))
    batch.events.update(read.events)
    wanted = projection_of(read_json(read.quest), str(head))
    if row is None:
        batch.creates[quest_id] = wanted
    elif any(row[name] != value for name, value in wanted.items()):
        batch.updates[quest_id] = (row["id"], known_head, wanted)
    for oid, effects in read.effects:
        commit = str(oid)
        batch.operations.extend(
            {
                "key": effect["key"],
                "quest_id": quest_id,
                "type": effect["type"],
                "payload": effect["payload"],
                "journal_commit": commit,
            }
            for effect in effects
        )


def _oid(text: str | None) -> pygit2.Oid | None:
    try:
        return None if text is None else pygit2.Oid(hex=text)
    except ValueError:  # not a commit id at all (a hand edit): read the whole journal
        return None


def _write(workspace: Workspace, batch: _Batch, report: RepairReport, *, locked: bool) -> None:
    # No savepoint: inside the engine's transaction a savepoint is two round trips for nothing.
    with transaction.atomic(savepoint=False):
        if not locked:
            lock_workspace(workspace)
            _drop_overtaken(workspace, batch)
        creates, updates = batch.creates, batch.updates
        known = _known_keys([op["key"] for op in batch.operations])
        missing = [op for op in batch.operations if op["key"] not in known]
        if creates:
            rows = [{"quest_id": quest_id, **wanted} for quest_id, wanted in creates.items()]
            insert_rows(Quest, workspace, rows)
        if len(updates) == 1:  # the engine's case: one row, one plain UPDATE
            [(pk, _, wanted)] = updates.values()
            Quest.objects.filter(pk=pk).update(**wanted)
        elif updates:
            changed = [Quest(pk=pk, **wanted) for pk, _, wanted in updates.values()]
            names = list(next(iter(updates.values()))[2])
            Quest.objects.bulk_update(changed, names, batch_size=BATCH)
        if missing:
            rows = [_settled(op, batch.events) for op in missing]
            insert_rows(Operation, workspace, rows, ignore_conflicts=True)
    report.projections_created.extend(creates)
    report.projections_updated.extend(updates)
    report.operations_created.extend(sorted(op["key"] for op in missing))


def _settled(op: dict, events: set[str]) -> dict:
    """The ledger row of a journaled effect, in the state the journal shows: succeeded when
    the events its outcome fed back are journaled (ids derived from its key), so the worker
    does not deliver it again; pending otherwise."""
    found = []
    while (event := outcome_event_id(op["key"], len(found))) in events:
        found.append(event)
    if not found:
        return {**op, "state": Operation.State.PENDING, "outcome": {}, "finished_at": None}
    outcome = {
        "status": "succeeded",
        "detail": {"rebuilt": "its outcome events are in the journal", "events": found},
        "events": [],  # already journaled: nothing to feed back
    }
    done = {"state": Operation.State.SUCCEEDED, "outcome": outcome, "finished_at": timezone.now()}
    return {**op, **done}


def _drop_overtaken(workspace: Workspace, batch: _Batch) -> None:
    """Leave out what the engine wrote between reading the rows and taking the lock: it writes
    under the same lock, and only forward, so its row is at least as new as what Git said."""
    ids = [*batch.creates, *batch.updates]
    now: dict[str, str] = {}
    if connection.vendor == "postgresql":
        # One array parameter, as in _known_keys: compiling an IN of hundreds of ids through
        # the ORM costs more than the query.
        table = connection.ops.quote_name(Quest._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f'SELECT "quest_id", "journal_head" FROM {table} '
                f'WHERE "workspace_id" = %s AND "quest_id" = ANY(%s)',
                [workspace.pk, ids],
            )
            now.update(cursor.fetchall())
    else:
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            rows = Quest.objects.filter(workspace=workspace, quest_id__in=chunk)
            now.update(rows.values_list("quest_id", "journal_head"))
    for quest_id in [q for q in batch.creates if q in now]:
        del batch.creates[quest_id]
    for quest_id, (_, seen, _) in list(batch.updates.items()):
        if now.get(quest_id) != seen:
            del batch.updates[quest_id]


def _rows(workspace: Workspace, quest_ids: list[str] | None = None) -> dict[str, dict]:
    """The projection rows' values, by quest id: what ``_check_quest`` compares. Values, not
    model instances: repair builds an instance only for a row it updates."""
    rows = Quest.objects.filter(workspace=workspace)
    if quest_ids is not None:
        rows = rows.filter(quest_id__in=quest_ids)
    return {row["quest_id"]: row for row in rows.values()}


def repair_quest(
    workspace: Workspace, quest_id: str, journal: Journal | None = None
) -> RepairReport:
    """Bring one quest's projection and ledger rows up to its journal head. For the engine,
    inside its transaction, with the workspace locked."""
    report = RepairReport(workspaces=1)
    journal = journal or workspace_journal(workspace)
    head = journal.head(quest_id)
    if head is None:
        return report
    batch = _Batch()
    row = _rows(workspace, [quest_id]).get(quest_id)
    _check_quest(journal, quest_id, head, row, batch, report)
    _write(workspace, batch, report, locked=True)
    return report


def repair_workspace(workspace: Workspace, report: RepairReport | None = None) -> RepairReport:
    """Repair every quest of a workspace; what it changed is audited as ``quest.repaired``."""
    report = report or RepairReport()
    done_before = (len(report.projections_created), len(report.projections_updated))
    ops_before = len(report.operations_created)
    report.workspaces += 1
    journal = workspace_journal(workspace)
    rows = _rows(workspace)
    batch = _Batch()
    for quest_id, head in sorted(journal.heads().items()):
        _check_quest(journal, quest_id, head, rows.get(quest_id), batch, report)
        if len(batch) >= BATCH or len(batch.operations) >= 4 * BATCH:
            _write(workspace, batch, report, locked=False)
            batch = _Batch(events=batch.events)
    if len(batch) or batch.operations:
        _write(workspace, batch, report, locked=False)
    repaired = (
        report.projections_created[done_before[0] :] + report.projections_updated[done_before[1] :]
    )
    restored = report.operations_created[ops_before:]
    if repaired or restored:
        with transaction.atomic():
            lock_workspace(workspace)
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
    if connection.vendor == "postgresql":
        # One array parameter, not one placeholder per key: parsing the query and preparing
        # each key as a lookup cost more than the lookup.
        table = connection.ops.quote_name(Operation._meta.db_table)
        with connection.cursor() as cursor:
            for start in range(0, len(keys), 10 * BATCH):
                chunk = keys[start : start + 10 * BATCH]
                cursor.execute(f'SELECT "key" FROM {table} WHERE "key" = ANY(%s)', [chunk])
                known.update(key for (key,) in cursor.fetchall())
        return known
    for start in range(0, len(keys), BATCH):
        chunk = keys[start : start + BATCH]
        known.update(Operation.objects.filter(key__in=chunk).values_list("key", flat=True))
    return known


def repair_all() -> RepairReport:
    report = RepairReport()
    for workspace in Workspace.objects.order_by("slug"):
        repair_workspace(workspace, report)
    return report
