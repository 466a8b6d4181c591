"""For tests that break the audit chain on purpose: lift the append-only triggers for a block.

The triggers (ledger/migrations/0002_audit_append_only.py) refuse every UPDATE and DELETE of
an audit row, which is what production needs and what a tampering test must get past, the way
a database owner would: PostgreSQL disables the table's user triggers (inside the test's
transaction, so a rollback restores them too); SQLite has no such switch, so its triggers are
dropped and created again from the migration's own SQL.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections

from ledger.models import AuditEntry

_migration = importlib.import_module("ledger.migrations.0002_audit_append_only")
TABLE = _migration.TABLE


@contextmanager
def audit_triggers_disabled(using: str = "default") -> Iterator[None]:
    connection = connections[using]
    vendor = connection.vendor
    if vendor == "postgresql":
        # ALTER TABLE refuses while deferred foreign-key checks of rows this transaction wrote
        # are pending: run them now, then defer again as Django's tests leave them.
        off, on = (
            [
                "SET CONSTRAINTS ALL IMMEDIATE",
                f"ALTER TABLE {TABLE} {switch} TRIGGER USER",
                "SET CONSTRAINTS ALL DEFERRED",
            ]
            for switch in ("DISABLE", "ENABLE")
        )
    elif vendor == "sqlite":
        off, on = _migration.SQLITE_REMOVE, _migration.SQLITE_INSTALL
    else:
        raise NotImplementedError(f"no audit triggers to lift on {vendor}")
    with connection.cursor() as cursor:
        for statement in off:
            cursor.execute(statement)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for statement in on:
                cursor.execute(statement)


def erase_audit_log(using: str = "default") -> None:
    """Empty the audit log past its triggers. A test whose transactions commit
    (``django_db(transaction=True)``) calls it before it ends: Django's flush between tests
    deletes (SQLite) or truncates (PostgreSQL) every table, and the triggers refuse that."""
    with audit_triggers_disabled(using):
        AuditEntry.objects.using(using).all().delete()
