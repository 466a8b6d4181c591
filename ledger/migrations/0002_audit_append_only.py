"""The audit log is append-only in the database itself, not only by convention in the code.

Triggers refuse UPDATE and DELETE of ``ledger_auditentry`` rows (and, on PostgreSQL, TRUNCATE
of a table that holds any). Deleting a workspace cascades to its audit entries, so a workspace
with audit history cannot be deleted: the message says so. A database owner can still disable
the triggers; the anchor in Git (docs/audit.md) is what catches that.

The SQL is kept here, not imported from live code, so the migration stays what it was when it
ran. On SQLite a table rebuild (``ALTER TABLE`` by copy) drops triggers: a later migration that
rebuilds ``ledger_auditentry`` must install them again (tests/ledger/test_audit_append_only.py
fails if it does not).
"""

from django.db import migrations

TABLE = "ledger_auditentry"


def sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def refusal(operation: str) -> str:
    return (
        f"{TABLE} is append-only: {operation} refused. Audit entries are never edited or"
        " removed, so a workspace with audit history cannot be deleted (see docs/audit.md)."
    )


# format() takes the operation from TG_OP, so both databases say the same words.
POSTGRESQL_INSTALL = [
    f"""
    CREATE OR REPLACE FUNCTION {TABLE}_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        -- Emptying an empty table destroys nothing; Django's flush does it between tests.
        IF TG_OP = 'TRUNCATE' AND NOT EXISTS (SELECT 1 FROM {TABLE}) THEN
            RETURN NULL;
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'restrict_violation',
            MESSAGE = format({sql_literal(refusal("%s"))}, TG_OP);
    END
    $$
    """,
    f"CREATE TRIGGER {TABLE}_no_update BEFORE UPDATE ON {TABLE}"
    f" FOR EACH ROW EXECUTE FUNCTION {TABLE}_append_only()",
    f"CREATE TRIGGER {TABLE}_no_delete BEFORE DELETE ON {TABLE}"
    f" FOR EACH ROW EXECUTE FUNCTION {TABLE}_append_only()",
    f"CREATE TRIGGER {TABLE}_no_truncate BEFORE TRUNCATE ON {TABLE}"
    f" FOR EACH STATEMENT EXECUTE FUNCTION {TABLE}_append_only()",
]
POSTGRESQL_REMOVE = [
    f"DROP TRIGGER IF EXISTS {TABLE}_no_truncate ON {TABLE}",
    f"DROP TRIGGER IF EXISTS {TABLE}_no_delete ON {TABLE}",
    f"DROP TRIGGER IF EXISTS {TABLE}_no_update ON {TABLE}",
    f"DROP FUNCTION IF EXISTS {TABLE}_append_only()",
]

# SQLite has no TRUNCATE; its "DELETE FROM t" runs the row trigger like any other delete.
SQLITE_INSTALL = [
    f"CREATE TRIGGER {TABLE}_no_{operation.lower()} BEFORE {operation} ON {TABLE}"
    f" BEGIN SELECT RAISE(ABORT, {sql_literal(refusal(operation))}); END"
    for operation in ("UPDATE", "DELETE")
]
SQLITE_REMOVE = [
    f"DROP TRIGGER IF EXISTS {TABLE}_no_{operation.lower()}" for operation in ("UPDATE", "DELETE")
]


def _statements(vendor: str, *, install: bool) -> list[str]:
    if vendor == "postgresql":
        return POSTGRESQL_INSTALL if install else POSTGRESQL_REMOVE
    if vendor == "sqlite":
        return SQLITE_INSTALL if install else SQLITE_REMOVE
    raise NotImplementedError(
        f"the append-only audit log has triggers for PostgreSQL and SQLite, not {vendor}"
    )


def install(apps, schema_editor):
    for statement in _statements(schema_editor.connection.vendor, install=True):
        # No parameters: the plpgsql body holds a literal %s for format().
        schema_editor.execute(statement, params=None)


def remove(apps, schema_editor):
    for statement in _statements(schema_editor.connection.vendor, install=False):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_initial")]

    operations = [migrations.RunPython(install, remove)]
