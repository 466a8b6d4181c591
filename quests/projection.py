"""The quest projection: the database row of a quest's journal head, and the statements that
move it.

The projection is what pages and lists read; the truth of a quest is its Git journal. The engine
moves a row from one journal head to the next with a compare-and-swap on ``journal_head``;
repair rebuilds rows from the journals. Both write under ``lock_workspace``.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import NamedTuple

from django.db import connection

from ephyra.core.quest import Quest as QuestValue
from ephyra.sql import insert_sql, insert_where_sql
from ledger.models import Operation
from quests.models import Quest, Workspace


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
    lock = projection_sql(connection.vendor).lock
    if lock:
        with connection.cursor() as cursor:
            cursor.execute(lock, [workspace.pk])


class ProjectionSQL(NamedTuple):
    lock: str | None  # None where the database has no row locks (SQLite)
    update: str
    fields: list  # the projection fields, in the order of ``update``'s placeholders
    create: str
    create_fields: list
    operation: str


@functools.cache
def projection_sql(vendor: str) -> ProjectionSQL:
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
    ws = Workspace._meta
    at_head = f"EXISTS (SELECT 1 FROM {qn(meta.db_table)} WHERE {where})"
    return ProjectionSQL(
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
    )
