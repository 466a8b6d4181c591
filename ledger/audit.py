"""The hash-chained audit log: each entry's hash covers its content and the previous hash.

``entry_hash = canonical_digest(entry_content(entry))``; the first entry of a workspace chains
from ``GENESIS``. Editing, removing or reordering an entry breaks every hash after it; the
database's triggers refuse UPDATE and DELETE (migration 0002); and the chain's head is anchored
in the workspace's Git repository (``journal.anchor``), so even a chain rebuilt consistently
from scratch, or cut short, is caught by ``audit_check``. docs/audit.md says how to recompute
a hash by hand.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, transaction
from django.utils import timezone

from ephyra.core.canonical import canonical_digest
from ephyra.sql import Result, Statement, insert_where_sql, run_together
from journal.anchor import (
    Anchor,
    AnchorConflict,
    AnchorError,
    anchor_history,
    read_anchor,
    write_anchor,
)
from ledger.models import AuditEntry

log = logging.getLogger(__name__)

GENESIS = "sha256:" + "0" * 64
# A checkpoint decision is what people are asked to stand behind later: anchor each one.
CHECKPOINT_ACTION = "quest.checkpoint_decided"
_ANCHOR_ATTEMPTS = 3


class AuditBroken(Exception):
    """The audit log does not verify; ``problem`` names the first broken entry and why."""

    def __init__(self, workspace: str, problem: str) -> None:
        self.workspace, self.problem = workspace, problem
        super().__init__(f"{workspace}: {problem}")


def hashed_time(at: datetime) -> str:
    """How an entry's time is hashed: ISO 8601 in UTC (the database hands times back in UTC)."""
    return at.astimezone(UTC).isoformat()


def entry_content(entry: AuditEntry) -> dict[str, Any]:
    """What an entry's hash covers (everything but the hash itself and the row's id)."""
    return {
        "sequence": entry.sequence,
        "at": hashed_time(entry.at),
        "actor": entry.actor,
        "action": entry.action,
        "object": entry.object,
        "payload": entry.payload,
        "previous_hash": entry.previous_hash,
    }


def entry_digest(entry: AuditEntry) -> str:
    return canonical_digest(entry_content(entry))


# The head of each workspace's chain as this process last wrote or read it: a guess that spares
# reading the last entry before each append. The insert built on it is conditional on the guess
# (that entry, with that hash, and nothing after it, read under the workspace lock), so a stale
# guess (another process appended, a rollback undid ours) inserts nothing and costs only the
# read it would have saved.
_heads: dict[int, tuple[int, str]] = {}


class ChainedInsert(NamedTuple):
    """The next entry of a chain and the conditional insert of it (see ``audit_statement``)."""

    statement: Statement
    entry: AuditEntry


def audit_statement(
    workspace,
    *,
    at: datetime,
    actor: str,
    action: str,
    object: str,
    payload: dict[str, Any],
    previous: tuple[int, str] | None = None,
) -> ChainedInsert:
    """The next entry, chained to the head this process saw last (or to ``previous``, the
    sequence and hash of an entry sent just before it), and an insert of it that inserts
    nothing unless that is still the chain's head when it runs. For a caller that sends it
    with its other statements (``quests.engine``) and then hands the result to
    ``audit_chained``; ``audit_append`` is both in one."""
    if at.utcoffset() is None:
        raise ValueError("an audit entry's time must carry a time zone")
    sequence, previous_hash = previous or _heads.get(workspace.pk, (0, GENESIS))
    entry = AuditEntry(
        workspace=workspace,
        sequence=sequence + 1,
        at=at,
        actor=actor,
        action=action,
        object=object,
        payload=payload,
        previous_hash=previous_hash,
    )
    entry.entry_hash = entry_digest(entry)
    fields, sql = _insert_sql(connection.vendor, first=sequence == 0)
    params = [f.get_db_prep_save(getattr(entry, f.attname), connection) for f in fields]
    params += [workspace.pk] if sequence == 0 else [workspace.pk, sequence, workspace.pk, sequence]
    if sequence:
        params.append(previous_hash)
    return ChainedInsert(Statement(sql, params), entry)


def audit_chained(workspace, pending: ChainedInsert, result: Result) -> AuditEntry:
    """Finish an ``audit_statement`` that ran: when the guess was stale and nothing was
    inserted, append the entry after reading the chain's head; remember the new head; anchor
    the entry once the transaction commits if it is due."""
    entry = pending.entry
    if result.rowcount == 1:
        if result.rows:
            entry.pk = result.rows[0][0]
        entry._state.adding, entry._state.db = False, DEFAULT_DB_ALIAS
    else:
        entry = _append_after_reading(workspace, entry)
    sequence, action = entry.sequence, entry.action
    _heads[workspace.pk] = (sequence, entry.entry_hash)
    if sequence % settings.EPHYRA_AUDIT_ANCHOR_EVERY == 0 or action == CHECKPOINT_ACTION:
        _anchor_on_commit(workspace, sequence, action)
    return entry


class _Due:
    """The entry a transaction's anchor will name: the last one due in it."""

    def __init__(self, workspace, sequence: int, action: str) -> None:
        self.workspace, self.sequence, self.action = workspace, sequence, action

    def __call__(self) -> None:
        _anchor_after_commit(self.workspace, self.sequence, self.action)


# The anchor each workspace has waiting for its transaction to commit, so that entries due in
# one transaction (a group commit of several checkpoint decisions) get one anchor, at the last
# of them, which covers the others. A waiting anchor whose transaction rolled back is no longer
# among the connection's commit hooks, and then the next due entry waits for its own.
_waiting: dict[int, _Due] = {}


def _anchor_on_commit(workspace, sequence: int, action: str) -> None:
    due = _waiting.get(workspace.pk)
    if due is not None and any(hook is due for _, hook, _ in connection.run_on_commit):
        due.sequence, due.action = sequence, action
        return
    _waiting[workspace.pk] = due = _Due(workspace, sequence, action)
    transaction.on_commit(due)


def audit_append(
    workspace, *, at: datetime, actor: str, action: str, object: str, payload: dict[str, Any]
) -> AuditEntry:
    """Append one entry. Call inside the transaction of the change it records, after locking
    the workspace row (``select_for_update``), so two writers cannot take the same sequence.

    Every ``EPHYRA_AUDIT_ANCHOR_EVERY``-th entry and every checkpoint decision is anchored in
    Git once the transaction commits, so an anchor never names an entry that was rolled back,
    and a failed anchor (logged) never undoes the change: the next anchor covers it."""
    pending = audit_statement(
        workspace, at=at, actor=actor, action=action, object=object, payload=payload
    )
    [result] = run_together([pending.statement])
    return audit_chained(workspace, pending, result)


def _append_after_reading(workspace, guessed: AuditEntry) -> AuditEntry:
    last = (
        AuditEntry.objects.filter(workspace=workspace)
        .order_by("-sequence")
        .values_list("sequence", "entry_hash")
        .first()
    )
    # The guessed entry was never stored: chain it onto the real head instead.
    entry = guessed
    entry.sequence, entry.previous_hash = (last[0] + 1, last[1]) if last else (1, GENESIS)
    entry.entry_hash = entry_digest(entry)
    entry.save(force_insert=True)
    return entry


@functools.cache
def _insert_sql(vendor: str, *, first: bool) -> tuple[list, str]:
    """The entry's fields and its conditional insert: the first entry of a workspace only
    while it has none; a later one only while entry #n, with its hash, is the last."""
    qn = connection.ops.quote_name
    table = qn(AuditEntry._meta.db_table)
    ws, seq = qn(AuditEntry._meta.get_field("workspace").column), qn("sequence")
    condition = f"NOT EXISTS (SELECT 1 FROM {table} WHERE {ws} = %s"
    if first:
        condition += ")"
    else:
        condition += (
            f" AND {seq} > %s) AND EXISTS (SELECT 1 FROM {table} WHERE {ws} = %s AND {seq} = %s"
            f" AND {qn('entry_hash')} = %s)"
        )
    fields = [f for f in AuditEntry._meta.concrete_fields if not f.primary_key]
    sql = insert_where_sql(AuditEntry, fields, condition, ignore_conflicts=False)
    if connection.features.can_return_columns_from_insert:
        sql += f" RETURNING {qn(AuditEntry._meta.pk.column)}"
    return fields, sql


def _anchor_after_commit(workspace, sequence: int, action: str) -> None:
    _waiting.pop(workspace.pk, None)
    try:
        _anchor(workspace, upto=sequence, action=action)
    except AuditBroken as exc:
        log.error("audit log not anchored: %s", exc)
    except Exception:
        # Anchoring is a second copy of what is already committed; losing one is repaired by
        # the next, so it must not turn a committed change into an error for the caller.
        log.exception(
            "audit log of %s not anchored at entry #%d; the next anchor covers it",
            workspace.slug,
            sequence,
        )


def audit_anchor(workspace) -> Anchor | None:
    """Anchor the chain's current head in the workspace's repository now.

    None when there is nothing new to anchor. Raises ``AuditBroken`` when the log does not
    verify (an anchor never vouches for a broken chain: a person asking checks all of it; the
    automatic anchors check what came since the last one), ``AnchorError`` when the repository
    cannot be read or written."""
    check = audit_check(workspace)
    if not check.ok:
        raise AuditBroken(workspace.slug, check.problem)  # type: ignore[arg-type]
    return _anchor(workspace, upto=None, action="")


def _anchor(workspace, *, upto: int | None, action: str) -> Anchor | None:
    for _ in range(_ANCHOR_ATTEMPTS):
        # Only the latest anchor: the anchors' whole history is audit_check's to read.
        current = read_anchor(workspace.repository, workspace.slug)
        start = current.sequence if current else 1
        if upto is not None and current is not None and upto <= current.sequence:
            return None  # a later anchor already covers it
        walk = _Walk(
            previous=None if current else GENESIS,
            sequence=start,
            anchored={current.sequence: current.entry_hash} if current else {},
        )
        walk.run(_entries(workspace, start, upto, chunk=500))
        if walk.problem is None:
            walk.check_length(current)
        if walk.problem is not None:
            # The walk saw only the entries since the anchor; the whole check names the cause.
            raise AuditBroken(workspace.slug, audit_check(workspace).problem or walk.problem)
        head = walk.last
        if head is None or (current is not None and head.sequence <= current.sequence):
            return None
        try:
            return write_anchor(
                workspace.repository,
                workspace.slug,
                sequence=head.sequence,
                entry_hash=head.entry_hash,
                at=hashed_time(head.at),
                when=timezone.now(),
                action=action or head.action,
            )
        except AnchorConflict:
            continue  # another writer anchored first: read its anchor and decide again
    raise AnchorConflict(
        f"{workspace.slug}: the audit anchor kept moving ({_ANCHOR_ATTEMPTS} attempts)"
    )


def _entries(workspace, start: int, upto: int | None, *, chunk: int) -> Iterator[AuditEntry]:
    """Entries #start to #upto (or the last) in sequence order, a chunk per plain query from
    the last sequence seen: an automatic anchor reads a handful, and a server-side cursor
    would cost three round trips for them. Entries are never updated or deleted (migration
    0002), so reading in chunks sees the same log one statement would."""
    sql = _entries_sql(connection.vendor)
    last = upto if upto is not None else 2**62  # sequences are PositiveBigIntegerField
    while True:
        # Raw: compiling the QuerySet costs more than running it (the anchor after each
        # checkpoint decision reads a handful of entries).
        batch = list(AuditEntry.objects.raw(sql, [workspace.pk, start, last, chunk]))
        yield from batch
        if len(batch) < chunk:
            return
        start = batch[-1].sequence + 1


@functools.cache
def _entries_sql(vendor: str) -> str:
    qn = connection.ops.quote_name
    columns = ", ".join(qn(f.column) for f in AuditEntry._meta.concrete_fields)
    return (
        f"SELECT {columns} FROM {qn(AuditEntry._meta.db_table)} "
        f"WHERE {qn('workspace_id')} = %s AND {qn('sequence')} >= %s AND {qn('sequence')} <= %s "
        f"ORDER BY {qn('sequence')} LIMIT %s"
    )


class _Walk:
    """Checks entries in sequence order; stops at the first one that does not verify."""

    def __init__(self, *, previous: str | None, sequence: int, anchored: dict[int, str]):
        # previous None: the walk starts at an anchored entry, whose own hash is the check.
        self.previous, self.expected, self.anchored = previous, sequence, anchored
        self.count, self.last, self.problem = 0, None, None
        self.broken_at: int | None = None

    def _broken(self, sequence: int, problem: str) -> None:
        self.broken_at, self.problem = sequence, problem

    def run(self, entries: Iterable[AuditEntry]) -> None:
        for entry in entries:
            expected, sequence = self.expected, entry.sequence
            if sequence != expected:
                which = (
                    f"entry #{expected} was"
                    if sequence == expected + 1
                    else f"entries #{expected} to #{sequence - 1} were"
                )
                gap = (
                    f"the log goes from #{expected - 1} to #{sequence}"
                    if expected > 1
                    else f"the log starts at #{sequence}"
                )
                return self._broken(expected, f"{which} deleted: {gap}")
            if self.previous is not None and entry.previous_hash != self.previous:
                after = "start the chain" if sequence == 1 else f"chain from entry #{sequence - 1}"
                return self._broken(
                    sequence,
                    f"entry #{sequence} does not {after}: entries were reordered or replaced",
                )
            if entry_digest(entry) != entry.entry_hash:
                return self._broken(
                    sequence, f"entry #{sequence} was edited: its content does not match its hash"
                )
            anchored = self.anchored.get(sequence)
            if anchored is not None and anchored != entry.entry_hash:
                return self._broken(
                    sequence,
                    f"entry #{sequence} has hash {entry.entry_hash} but the anchor in Git names "
                    f"{anchored}: the log was rebuilt after it was anchored",
                )
            self.previous, self.expected = entry.entry_hash, expected + 1
            self.count, self.last = self.count + 1, entry
        return None

    def check_length(self, anchor: Anchor | None) -> None:
        """After a clean walk: the log must reach the latest anchor."""
        end = self.expected - 1
        if anchor is None or end >= anchor.sequence:
            return
        held = f"ends at entry #{end}" if end else "is empty"
        self._broken(
            end + 1,
            f"the log {held} but the anchor in Git names entry #{anchor.sequence}: "
            f"entries #{end + 1} to #{anchor.sequence} were truncated",
        )


@dataclass(frozen=True)
class AuditCheck:
    """What ``audit_check`` found for one workspace."""

    workspace: str
    verified: int  # entries from #1 that verified before the first problem
    anchor: Anchor | None  # the latest anchor, when it could be read
    problem: str | None = None
    broken_at: int | None = None  # the first broken entry, when the problem is an entry

    @property
    def ok(self) -> bool:
        return self.problem is None

    def summary(self) -> str:
        if self.problem is not None:
            return f"{self.workspace}: BROKEN: {self.problem}"
        where = f"anchored at #{self.anchor.sequence}" if self.anchor else "not anchored yet"
        return f"{self.workspace}: verified {self.verified} entries ({where})"


def audit_check(workspace) -> AuditCheck:
    """Verify the whole chain of a workspace, and each anchor in Git against it."""
    try:
        anchors = anchor_history(workspace.repository, workspace.slug)
    except AnchorError as exc:
        return AuditCheck(workspace.slug, 0, None, f"the anchors in Git cannot be read: {exc}")
    latest = anchors[-1] if anchors else None
    walk = _Walk(previous=GENESIS, sequence=1, anchored={a.sequence: a.entry_hash for a in anchors})
    walk.run(_entries(workspace, 1, None, chunk=2000))
    if walk.problem is None:
        walk.check_length(latest)
    return AuditCheck(workspace.slug, walk.count, latest, walk.problem, walk.broken_at)


def audit_verify(workspace) -> tuple[int, str | None]:
    """(entries verified, the first problem or None): ``audit_check`` in its first shape."""
    check = audit_check(workspace)
    return check.verified, check.problem
