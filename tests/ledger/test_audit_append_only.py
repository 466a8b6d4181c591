"""The database itself refuses to edit or remove audit entries (migration 0002's triggers)."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction

from journal.store import Journal
from ledger.audit import audit_append, audit_verify
from ledger.models import AuditEntry
from quests.models import Workspace
from tests.audit_tampering import audit_triggers_disabled, erase_audit_log

pytestmark = pytest.mark.django_db

migration = importlib.import_module("ledger.migrations.0002_audit_append_only")


def refused(operation: str) -> str:
    return (
        f"ledger_auditentry is append-only: {operation} refused. Audit entries are never edited"
        " or removed, so a workspace with audit history cannot be deleted (see docs/audit.md)."
    )


@pytest.fixture
def shop(tmp_path):
    path = tmp_path / "mirror.git"
    Journal.init(path, bare=True)
    workspace = Workspace.objects.create(slug="shop", name="Shop", repository=str(path))
    for n in range(3):
        audit_append(
            workspace,
            at=datetime(2026, 12, 1, 9, n, tzinfo=UTC),
            actor="ann",
            action="quest.note",
            object="quest:q1",
            payload={"n": n},
        )
    return workspace


def first_line(error: Exception) -> str:
    return str(error).splitlines()[0]  # PostgreSQL adds a CONTEXT line after the message


def test_an_update_is_refused_with_the_reason(shop):
    with pytest.raises(IntegrityError) as error, transaction.atomic():
        AuditEntry.objects.filter(workspace=shop, sequence=2).update(actor="mallory")
    assert first_line(error.value) == refused("UPDATE")
    assert AuditEntry.objects.get(workspace=shop, sequence=2).actor == "ann"


def test_saving_a_changed_entry_is_refused_too(shop):
    entry = AuditEntry.objects.get(workspace=shop, sequence=1)
    entry.payload = {"n": 99}
    with pytest.raises(IntegrityError) as error, transaction.atomic():
        entry.save()
    assert first_line(error.value) == refused("UPDATE")


def test_a_delete_is_refused_with_the_reason(shop):
    with pytest.raises(IntegrityError) as error, transaction.atomic():
        AuditEntry.objects.filter(workspace=shop, sequence=3).delete()
    assert first_line(error.value) == refused("DELETE")
    assert audit_verify(shop) == (3, None)


def test_a_workspace_with_audit_history_cannot_be_deleted(shop):
    with pytest.raises(IntegrityError) as error, transaction.atomic():
        shop.delete()
    assert first_line(error.value) == refused("DELETE")
    assert Workspace.objects.filter(slug="shop").exists()


def test_a_workspace_without_audit_history_can_be_deleted(tmp_path):
    empty = Workspace.objects.create(slug="empty", name="Empty", repository=str(tmp_path))
    empty.delete()
    assert not Workspace.objects.filter(slug="empty").exists()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite has no TRUNCATE")
def test_truncate_is_refused_on_postgresql(shop):
    with pytest.raises(IntegrityError) as error, transaction.atomic(), connection.cursor() as c:
        c.execute("SET CONSTRAINTS ALL IMMEDIATE")  # TRUNCATE waits for no deferred check
        c.execute("TRUNCATE ledger_auditentry CASCADE")
    assert first_line(error.value) == refused("TRUNCATE")
    assert AuditEntry.objects.count() == 3


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite has no TRUNCATE")
def test_truncating_an_empty_log_is_allowed_so_a_test_flush_works(db):
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE ledger_auditentry")
    assert AuditEntry.objects.count() == 0


def test_appending_still_works(shop):
    entry = audit_append(
        shop,
        at=datetime(2026, 12, 1, 10, 0, tzinfo=UTC),
        actor="bo",
        action="a",
        object="o",
        payload={},
    )
    assert entry.sequence == 4
    assert audit_verify(shop) == (4, None)


def test_the_tampering_helper_lifts_the_triggers_only_inside_its_block(shop):
    with audit_triggers_disabled():
        AuditEntry.objects.filter(workspace=shop, sequence=2).update(actor="mallory")
    with pytest.raises(IntegrityError) as error, transaction.atomic():
        AuditEntry.objects.filter(workspace=shop, sequence=2).update(actor="ann")
    assert first_line(error.value) == refused("UPDATE")
    assert AuditEntry.objects.get(workspace=shop, sequence=2).actor == "mallory"


def test_the_migrations_reverse_sql_removes_the_triggers_and_install_puts_them_back(shop):
    vendor = connection.vendor
    with connection.cursor() as cursor:
        for statement in migration._statements(vendor, install=False):
            cursor.execute(statement)
    AuditEntry.objects.filter(workspace=shop, sequence=1).update(actor="anyone")
    with connection.cursor() as cursor:
        for statement in migration._statements(vendor, install=True):
            cursor.execute(statement)
    with pytest.raises(IntegrityError), transaction.atomic():
        AuditEntry.objects.filter(workspace=shop, sequence=1).update(actor="ann")


def test_an_audit_time_without_a_zone_is_refused(shop):
    with pytest.raises(ValueError, match="must carry a time zone"):
        audit_append(
            shop, at=datetime(2026, 12, 1, 9, 0), actor="a", action="b", object="c", payload={}
        )


def note(workspace):
    audit_append(
        workspace,
        at=datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
        actor="a",
        action="b",
        object="c",
        payload={},
    )


@pytest.mark.django_db(transaction=True)
def test_a_committed_log_refuses_the_test_flush_until_the_helper_erases_it(tmp_path):
    workspace = Workspace.objects.create(slug="kept", name="Kept", repository=str(tmp_path))
    note(workspace)
    with pytest.raises(CommandError, match="couldn't be flushed"):
        call_command("flush", interactive=False, verbosity=0)
    assert AuditEntry.objects.count() == 1  # the flush rolled back whole
    erase_audit_log()
    assert AuditEntry.objects.count() == 0
    note(workspace)
    with pytest.raises(IntegrityError):  # the helper put the triggers back
        AuditEntry.objects.update(actor="x")
    erase_audit_log()  # so this test's own teardown flush goes through
