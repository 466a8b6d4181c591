"""Transaction-scoped locks on names (an export, a fingerprint), for work that must not run
twice at once in two processes. On PostgreSQL, ``pg_advisory_xact_lock``: held until the
transaction ends, released by its commit or rollback, whatever happens to the process. SQLite
needs none: its transactions begin IMMEDIATE (``ephyra.environment``), so a second writer does
not even read before the first commits."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from django.db import connection


def bound_waits(milliseconds: int) -> None:
    """Make every lock this transaction waits for from now on fail after ``milliseconds`` (0:
    no bound) with an OperationalError, rather than keep a request waiting without end."""
    if connection.vendor == "postgresql" and milliseconds:
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = {int(milliseconds)}")


def hold(workspace, kind: str, names: Iterable[str]) -> bool:
    """Wait for, then hold until this transaction ends, the lock of each of ``names`` (of
    ``kind``, in ``workspace``); True when that took locks, so what was read before them must
    be read again. Taken in one statement, in one order: two callers holding some of the same
    names never wait on each other in a cycle, provided each takes its locks of a kind in one
    call (as ``signals_receive`` does, in a transaction of its own)."""
    if connection.vendor != "postgresql":
        return False
    keys = sorted({_key(workspace.pk, kind, name) for name in names})
    if not keys:
        return False
    with connection.cursor() as cursor:
        # WITH ORDINALITY: the rows, and so the locks, come in the array's (sorted) order.
        cursor.execute(
            "SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) WITH ORDINALITY AS t(k, n) "
            "ORDER BY n",
            [keys],
        )
    return True


def _key(workspace_id: int, kind: str, name: str) -> int:
    digest = hashlib.sha256(f"ephyra|{kind}|{workspace_id}|{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
