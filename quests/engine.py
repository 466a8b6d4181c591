"""The engine: the one writer of quests. Every entry point (API, pages, webhooks, tasks,
management commands) moves a quest through ``quest_apply``.

Git first, database second: the journal commit is the truth; the projection, the ledger rows
and the audit entry follow in one database transaction. A crash between the two loses nothing,
because ``repair`` rebuilds what the database lacks from the journal.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

from django.db import connection, transaction

from ephyra.core.events import BaseEvent
from ephyra.core.rules import MachinePolicy
from ephyra.sql import Statement, prepared, run_together
from journal.apply import Applied, apply, apply_all
from journal.store import Journal
from ledger.audit import audit_append, audit_chained, audit_statement
from ledger.models import Operation
from quests.models import Workspace
from quests.projection import lock_workspace, projection_of, projection_sql
from quests.repair import repair_quest
from quests.workspaces import workspace_journal, workspace_policy

# One line per transition, for operators: "shop q1 e7 claimed: hypothesised -> handed_off r1".
transitions = logging.getLogger("ephyra.transitions")


# The journal replication hook of this thread (``replicating``): the worker's, which pushes
# the refs a group moved before the group's database transaction commits.
_replication = threading.local()


@contextmanager
def replicating(push: Callable[[Workspace, list[str]], None]) -> Iterator[None]:
    """While inside, every group's journal writes are followed by ``push(workspace, quest
    ids)`` before the database sees them, so the database is never ahead of a journal remote
    that answers. ``push`` does not raise: a failed push leaves the transitions unconfirmed."""
    before = getattr(_replication, "push", None)
    _replication.push = push
    try:
        yield
    finally:
        _replication.push = before


@dataclass(frozen=True)
class Outcome:
    applied: Applied
    operations: int  # ledger rows inserted


def quest_apply(
    workspace: Workspace,
    event: BaseEvent,
    *,
    policy: MachinePolicy | None = None,
    after_journal: Callable[[], None] | None = None,
) -> Outcome:
    """Decide, journal with compare-and-swap, then project, record effects and audit.

    ``after_journal`` runs between the Git write and the database transaction; tests use it
    to inject a crash exactly there."""
    return quest_apply_all(workspace, [event], policy=policy, after_journal=after_journal)[0]


def quest_apply_all(
    workspace: Workspace,
    events: Sequence[BaseEvent],
    *,
    policy: MachinePolicy | None = None,
    after_journal: Callable[[], None] | None = None,
) -> list[Outcome]:
    """``quest_apply`` for a group of events of distinct quests (a group commit): each one is
    decided and journaled in turn (Git first), then all of them are projected, recorded in the
    ledger and audited in one database transaction, usually one round trip and one commit.

    One event per quest, so that a crash between the Git writes and the commit leaves each
    quest's journal at most one event ahead of the database, with that event at its head:
    offered again, it is answered as the head's own (``journal.apply``), never decided twice.
    ``after_journal`` runs once, after the last Git write. The group's objects are written to
    Git as one pack (``journal.apply.apply_all``) before any ref moves."""
    quest_ids = [event.quest for event in events]
    if len(set(quest_ids)) != len(quest_ids):
        raise ValueError(f"a group holds one event per quest, got {quest_ids}")
    policy = policy or workspace_policy(workspace)
    journal = workspace_journal(workspace)
    # A group's objects go to Git as one pack; one event's as loose objects (a pack per event
    # would only make more packs to merge).
    applied = (
        apply_all(journal, events, policy)
        if len(events) > 1
        else [apply(journal, event, policy) for event in events]
    )
    if after_journal is not None and any(one.decision.accepted for one in applied):
        after_journal()
    push = getattr(_replication, "push", None)
    if push is not None:
        moved = [e.quest for e, one in zip(events, applied, strict=True) if one.decision.accepted]
        if moved:
            push(workspace, moved)
    journal.consolidate()  # now and then: many packs or loose objects become one pack
    outcomes: list[Outcome] = [Outcome(one, 0) for one in applied]
    # No savepoint of its own: inside a caller's transaction (the worker's fenced one) a failure
    # here fails the caller's whole transaction anyway, and a savepoint is two round trips.
    with transaction.atomic(savepoint=False):
        group: list[tuple[int, BaseEvent, Applied]] = []
        for index, (event, one) in enumerate(zip(events, applied, strict=True)):
            if not one.decision.accepted:
                continue
            if one.duplicate:
                _project(workspace, journal, group, outcomes)
                group = []
                outcomes[index] = _follow(workspace, journal, event, one)
            else:
                group.append((index, event, one))
        _project(workspace, journal, group, outcomes)
    for event, one in zip(events, applied, strict=True):
        if one.decision.accepted and not one.duplicate:
            _log_transition(workspace, event, one)
    return outcomes


def _log_transition(workspace: Workspace, event: BaseEvent, applied: Applied) -> None:
    decision = applied.decision
    before = "-" if decision.state_before is None else str(decision.state_before)
    transitions.info(
        "%s %s %s %s: %s -> %s r%d",
        workspace.slug,
        decision.quest_id,
        event.id,
        decision.event_type,
        before,
        decision.state,
        decision.revision,
        extra={
            "workspace": workspace.slug,
            "quest": decision.quest_id,
            "event": event.id,
            "event_type": decision.event_type,
            "from": before,
            "to": str(decision.state),
            "revision": decision.revision,
            "journal_head": str(applied.head),
        },
    )


def _audit_record(event: BaseEvent, applied: Applied) -> dict:
    decision = applied.decision
    return {
        "at": event.at,
        "actor": event.actor,
        "action": f"quest.{event.type}",
        "object": f"quest:{decision.quest_id}",
        "payload": {
            "event": event.id,
            "from": None if decision.state_before is None else str(decision.state_before),
            "to": str(decision.state),
            "revision": decision.revision,
            "journal_head": str(applied.head),
            "effects": [effect.key for effect in decision.effects],
        },
    }


def _follow(workspace: Workspace, journal: Journal, event: BaseEvent, applied: Applied) -> Outcome:
    """Another writer journaled this event first, or it is a redelivery: follow the journal
    head, and audit only if the database had not taken it yet."""
    lock_workspace(workspace)
    caught_up = repair_quest(workspace, applied.decision.quest_id, journal)
    if not caught_up.changed:
        return Outcome(applied, 0)
    audit_append(workspace, **_audit_record(event, applied))
    return Outcome(applied, len(caught_up.operations_created))


def _project(
    workspace: Workspace,
    journal: Journal,
    group: list[tuple[int, BaseEvent, Applied]],
    outcomes: list[Outcome],
) -> None:
    """The database writes of freshly journaled transitions, in one round trip: the
    workspace lock, then each transition's quest, effects, signal and audit entry, each
    entry chained to the one before. The usual case: the database saw everything up to each
    commit's parent, so these are all that is missing. Every statement is conditional, so
    nothing is written wrongly when that is not so; then the slower paths below fill in."""
    if not group:
        return
    lock = projection_sql(connection.vendor).lock
    statements = [Statement(lock, [workspace.pk])] if lock else []
    parts = []
    previous = None  # the entry the next one chains to; None: the head this process saw last
    for index, event, one in group:
        audit = audit_statement(workspace, previous=previous, **_audit_record(event, one))
        previous = (audit.entry.sequence, audit.entry.entry_hash)
        data = journal.quest_data(one.head)  # the dict the journal wrote, not a copy
        transition = _transition(workspace, event, one.decision, data, str(one.head), one.parent)
        parts.append((index, one, transition, len(statements), audit))
        statements += [*transition.statements, audit.statement]
    results = run_together(statements)
    for index, one, transition, start, audit in parts:
        mine = results[start : start + len(transition.statements) + 1]
        inserted = sum(mine[i].rowcount for i in transition.operations)
        if mine[transition.projection].rowcount != 1:
            # The database is behind Git (a crash after an earlier journal write) or another
            # writer already projected past this commit: follow the journal head and add every
            # ledger row the database lacks.
            quest_id = one.decision.quest_id
            inserted += len(repair_quest(workspace, quest_id, journal).operations_created)
        # An entry whose chain guess was stale (and so every entry after it) is appended here.
        audit_chained(workspace, audit, mine[-1])
        outcomes[index] = Outcome(one, inserted)


class _Transition(NamedTuple):
    statements: list[Statement]
    projection: int  # the index of the statement that moves (or creates) the projection row
    operations: range  # the indexes of the ledger rows' inserts


def _transition(
    workspace: Workspace, event: BaseEvent, decision, data: dict, head: str, parent
) -> _Transition:
    """The statements that project one accepted transition (under the workspace lock the
    caller takes), in order: move the quest's row from ``parent`` to ``head`` (create it, for a
    creation) to ``data``, the commit's ``quest.json``, which matches no row when the row is
    elsewhere; insert the transition's ledger rows only if the row is now at ``head`` (a row at
    a head means its effects are in the ledger, so then they belong there); record the signal."""
    sql = projection_sql(connection.vendor)
    statements: list[Statement] = []
    fields = projection_of(data, head)
    if parent is None:
        row = {"workspace": workspace.pk, "quest_id": decision.quest_id, **fields}
        values = [f.get_db_prep_save(row[f.name], connection) for f in sql.create_fields]
        statements.append(Statement(sql.create, values))
    else:
        # The condition on journal_head is the compare-and-swap.
        params = [f.get_db_prep_save(fields[f.name], connection) for f in sql.fields]
        params += [workspace.pk, decision.quest_id, str(parent)]
        statements.append(Statement(sql.update, params))
    projection = len(statements) - 1
    if decision.effects:
        rows = [
            {
                "key": effect.key,
                "quest_id": decision.quest_id,
                "type": str(effect.type),
                "payload": effect.payload,
                "journal_commit": head,
            }
            for effect in decision.effects
        ]
        _, values = prepared(Operation, workspace, rows)
        at_head = [workspace.pk, decision.quest_id, head]
        statements += [Statement(sql.operation, [*row, *at_head]) for row in values]
    operations = range(projection + 1, len(statements))
    return _Transition(statements, projection, operations)


