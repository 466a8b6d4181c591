"""The engine: the one writer of quests. Every entry point (API, pages, webhooks, tasks,
management commands) moves a quest through ``quest_apply``.

Git first, database second: the journal commit is the truth; the projection, the ledger rows
and the audit entry follow in one database transaction. A crash between the two loses nothing,
because ``repair`` rebuilds what the database lacks from the journal.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection, transaction

from ephyra.core.events import BaseEvent
from ephyra.core.quest import Quest as QuestValue
from ephyra.core.rules import MachinePolicy
from ephyra.policy import default_policy, parse_policy
from journal.apply import Applied, apply, apply_all
from journal.store import Journal
from ledger.audit import audit_append, audit_chained, audit_statement
from ledger.models import Operation
from quests.models import Quest, Signal, Workspace
from quests.statements import Statement, insert_sql, insert_where_sql, prepared, run_together


@dataclass(frozen=True)
class Outcome:
    applied: Applied
    operations: int  # ledger rows inserted


def workspace_create(
    slug: str, source: str, *, base_branch: str = "main", name: str = ""
) -> Workspace:
    """Register a repository: mirror it under the data directory, where its journals live, and
    remember the source as the remote the journals are pushed to."""
    if urlsplit(source).password:
        # Secrets never reach the database (the remote is stored) or Git's config.
        raise ValueError(
            "the repository URL carries a password; give it without credentials and let git's "
            "credential helper supply them"
        )
    mirror = Path(settings.DATA_DIR) / "mirrors" / f"{slug}.git"
    if mirror.exists():
        raise ValueError(f"{mirror} already exists")
    mirror.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["git", "clone", "--quiet", "--mirror", source, str(mirror)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ValueError(f"cannot mirror {source}: {done.stderr.strip()}")
    branches = subprocess.run(
        [
            "git",
            "--git-dir",
            str(mirror),
            "for-each-ref",
            "--format=%(refname:lstrip=2)",
            "refs/heads/",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if base_branch not in branches:
        shutil.rmtree(mirror)  # refused: nothing is left behind
        there = f"its branches: {', '.join(branches)}" if branches else "it has no branches"
        raise ValueError(f"{source} has no branch {base_branch!r}; {there}")
    return Workspace.objects.create(
        slug=slug, name=name or slug, repository=str(mirror), base_branch=base_branch, remote=source
    )


_journals = threading.local()


def workspace_journal(workspace: Workspace) -> Journal:
    """The workspace's journal, one open repository per thread (pygit2 objects are not shared
    between threads), so its reference and tree caches stay warm across events."""
    cache = _journals.__dict__.setdefault("by_path", {})
    journal = cache.get(workspace.repository)
    if journal is None:
        journal = cache[workspace.repository] = Journal(Path(workspace.repository))
    return journal


def forget_journals() -> None:
    """Drop this thread's open journals and what they remember, as a restarted process
    would have (benchmarks measure repair that way)."""
    _journals.__dict__.pop("by_path", None)


@functools.lru_cache(maxsize=64)
def _machine_policy(text: str | None, source: str) -> MachinePolicy:
    policy = default_policy() if text is None else parse_policy(text, source)
    return policy.machine()


def workspace_policy(workspace: Workspace) -> MachinePolicy:
    """The machine view of the workspace's current reviewed policy (the default when none).
    Parsed once per policy text: a reviewed version never changes, a new one has a new text."""
    if workspace.policy_id is None:
        return _machine_policy(None, "default")
    return _machine_policy(workspace.policy.text, f"policy {workspace.policy.digest}")


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
    return outcomes


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
    from quests.repair import repair_quest  # repair builds on this module's projection

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
    from quests.repair import repair_quest  # repair builds on this module's projection

    lock = _statements(connection.vendor).lock
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
    sql = _statements(connection.vendor)
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
    if event.type in SIGNAL_EVENTS:
        statements.append(_signal(workspace, event))
    return _Transition(statements, projection, operations)


def projection_fields(quest: QuestValue, head: str) -> dict:
    """The projection row of a quest at a journal head: what repair compares field by field."""
    return projection_of(quest.to_dict(), head)


def projection_of(data: dict, head: str) -> dict:
    """The projection row from a quest's JSON form (``Quest.to_dict()``, or ``quest.json`` as
    read from the journal, which repair uses without building the Quest)."""
    return {
        "state": str(data["state"]),
        "revision": data["revision"],
        "route": data["route"] or "",
        "risk": data["risk"] or "",
        "fingerprint": data["fingerprint"],
        "severity": str(data["severity"]),
        "title": data["title"],
        "claim": data["claim"] or "",
        "resume_state": str(data["resume_state"] or ""),
        "park_reason": data["park_reason"] or "",
        "signal_count": data["signal_count"],
        "created_at": datetime.fromisoformat(data["created_at"]),
        "updated_at": datetime.fromisoformat(data["updated_at"]),
        "journal_head": head,
        "data": data,
    }


def lock_workspace(workspace: Workspace) -> None:
    """One database writer per workspace at a time, so a projection never moves backwards and
    the audit chain takes one entry at a time. SQLite has no row locks (Django's
    select_for_update is a plain SELECT there): its writers queue for the database's write
    lock at their first write."""
    lock = _statements(connection.vendor).lock
    if lock:
        with connection.cursor() as cursor:
            cursor.execute(lock, [workspace.pk])


SIGNAL_EVENTS = frozenset({"signal_sensed", "signal_merged", "regression_reopened"})


class _Statements(NamedTuple):
    lock: str | None  # None where the database has no row locks (SQLite)
    update: str
    fields: list  # the projection fields, in the order of ``update``'s placeholders
    create: str
    create_fields: list
    operation: str
    signal: str
    signal_fields: list


@functools.cache
def _statements(vendor: str) -> _Statements:
    """The engine's statements, written out rather than through QuerySets, whose compiling
    costs more than the statements (~0.3 ms of ~0.4 ms on PostgreSQL here); every value is
    prepared by its model field, as the ORM would."""
    qn = connection.ops.quote_name
    meta = Quest._meta
    names = [f.name for f in meta.concrete_fields if f.name not in {"id", "workspace", "quest_id"}]
    fields = [meta.get_field(name) for name in names]
    key = ("workspace", "quest_id")
    where = " AND ".join(f"{qn(meta.get_field(n).column)} = %s" for n in (*key, "journal_head"))
    columns = ", ".join(f"{qn(f.column)} = %s" for f in fields)
    create_fields = [meta.get_field(name) for name in (*key, *names)]
    operation_fields = [f for f in Operation._meta.concrete_fields if not f.primary_key]
    signal_fields = [f for f in Signal._meta.concrete_fields if not f.primary_key]
    ws = Workspace._meta
    at_head = f"EXISTS (SELECT 1 FROM {qn(meta.db_table)} WHERE {where})"
    return _Statements(
        lock=(
            f"SELECT 1 FROM {qn(ws.db_table)} WHERE {qn(ws.pk.column)} = %s FOR UPDATE"
            if connection.features.has_select_for_update
            else None
        ),
        update=f"UPDATE {qn(meta.db_table)} SET {columns} WHERE {where}",
        fields=fields,
        create=insert_sql(Quest, create_fields, 1, ignore_conflicts=True),
        create_fields=create_fields,
        # Keys name the event, so a new transition's keys are new; a conflict is a race.
        operation=insert_where_sql(Operation, operation_fields, at_head, ignore_conflicts=True),
        signal=insert_sql(Signal, signal_fields, 1, ignore_conflicts=True),
        signal_fields=signal_fields,
    )


def _signal(workspace: Workspace, event: BaseEvent) -> Statement:
    """Record the event's signal; a signal id already recorded is kept as first seen."""
    signal = event.signal  # type: ignore[attr-defined]
    values = {
        "workspace": workspace.pk,
        "signal_id": signal.id,
        "fingerprint": signal.fingerprint,
        "severity": str(signal.severity),
        "title": signal.title,
        "quest_id": event.quest,
        "received_at": event.at,
    }
    sql = _statements(connection.vendor)
    return Statement(
        sql.signal, [f.get_db_prep_save(values[f.name], connection) for f in sql.signal_fields]
    )
