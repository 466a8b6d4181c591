"""Backup and restore, round trip, with real processes: ``manage.py backup`` of an install with
quests in many states, ``manage.py restore`` onto a fresh database and a fresh data directory,
then ``audit verify`` and ``repair`` there find everything consistent and the quests, the
ledger and the audit log are the same rows. On SQLite and on PostgreSQL (a new database on the
same server). A damaged file is refused by name, and a non-empty install is refused."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.db import connection

from ephyra.core.proof import CheckResult
from journal.store import Journal
from ledger.audit import audit_anchor
from quests.engine import quest_apply
from quests.models import Quest, Workspace
from tests.audit_tampering import erase_audit_log
from tests.core.lifecycle_helpers import next_event
from tests.core.story import Story
from tests.ledger.harness import ROOT, database_url, worker_env

pytestmark = pytest.mark.django_db(transaction=True)
QUESTS = 14  # quest i takes i steps of the main line: every state from sensed on


def manage(env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if ok:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def source(tmp_path, settings):
    """An install with quests in many states, an anchored audit log, and ledger operations."""
    settings.DATA_DIR = tmp_path / "data1"
    (tmp_path / "data1" / "mirrors").mkdir(parents=True)
    Journal.init(tmp_path / "data1" / "mirrors" / "shop.git", bare=True)
    created = Workspace.objects.create(slug="shop", name="Shop", repository="mirrors/shop.git")
    ws = Workspace.objects.get(pk=created.pk)  # read back: the path under this data directory
    passing = (CheckResult(name="tests", passed=True), CheckResult(name="probe", passed=True))
    try:
        _drive(ws, passing)
        assert audit_anchor(ws) is not None
        yield ws, worker_env(EPHYRA_DATA_DIR=str(tmp_path / "data1"))
    finally:
        erase_audit_log()


def _drive(ws: Workspace, passing) -> None:
    for i in range(QUESTS):
        story, quest = Story(f"q{i}"), None
        for _ in range(i + 1):
            if quest is not None and str(quest.state) == "closed":
                break
            outcome = quest_apply(ws, next_event(story, quest, checks=passing))
            if not outcome.applied.decision.accepted:
                break
            quest = outcome.applied.decision.quest


@pytest.fixture
def target(tmp_path):
    """The environment of a fresh install: a new data directory and a new, empty database."""
    data = tmp_path / "data2"
    data.mkdir()
    if connection.vendor == "sqlite":
        yield worker_env(
            EPHYRA_DATA_DIR=str(data), DATABASE_URL=f"sqlite:///{data / 'ephyra.sqlite3'}"
        )
        return
    name = f"ephyra_restore_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    url = database_url().rsplit("/", 1)[0] + f"/{name}"
    try:
        yield worker_env(EPHYRA_DATA_DIR=str(data), DATABASE_URL=url)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def rows(env: dict[str, str]) -> dict:
    """The quests, the ledger and the audit log of an install, as dumpdata writes them."""
    models = ("quests.quest", "ledger.operation", "ledger.auditentry", "ledger.inboundevent")
    out = manage(env, "dumpdata", *models, "--indent", "0").stdout
    return {(r["model"], r["pk"]): r["fields"] for r in json.loads(out)}


def test_a_backup_restored_on_a_fresh_install_verifies_and_needs_no_repair(
    source, target, tmp_path
):
    ws, here = source
    states = set(Quest.objects.filter(workspace=ws).values_list("state", flat=True))
    assert len(states) >= 8
    backup = tmp_path / "backup"
    said = manage(here, "backup", str(backup)).stdout
    assert "backup in" in said and "1 workspaces' journals" in said
    manifest = json.loads((backup / "manifest.json").read_text())
    assert set(manifest["files"]) == {manifest["database"]["file"], "journals/shop.bundle"}
    assert {"ephyra", "django", "git", "database"} <= set(manifest["versions"])

    said = manage(target, "restore", str(backup)).stdout
    assert "restored the database and 1 workspaces' journals" in said

    verified = manage(target, "audit", "verify").stdout
    assert "shop: verified" in verified and "anchored at #" in verified
    assert "BROKEN" not in verified
    checked = manage(target, "repair", "--check").stdout  # exit 0: nothing to change
    assert "0 projections created, 0 updated, 0 ledger operations restored" in checked
    repaired = manage(target, "repair").stdout
    assert "0 projections created, 0 updated, 0 ledger operations restored" in repaired
    assert rows(target) == rows(here)
    mirror = tmp_path / "data2" / "mirrors" / "shop.git"
    assert Journal(mirror).heads() == Journal(Path(ws.repository)).heads()


def test_a_damaged_backup_file_is_refused_by_name_and_nothing_is_restored(source, target, tmp_path):
    _, here = source
    backup = tmp_path / "backup"
    manage(here, "backup", str(backup))
    bundle = backup / "journals" / "shop.bundle"
    data = bytearray(bundle.read_bytes())
    data[-1] ^= 0xFF
    bundle.write_bytes(bytes(data))

    refused = manage(target, "restore", str(backup), ok=False)
    assert refused.returncode == 1
    assert "journals/shop.bundle does not match its SHA-256" in refused.stderr
    assert not (tmp_path / "data2" / "mirrors").exists()
    shown = manage(target, "showmigrations", "quests").stdout
    assert "[X]" not in shown  # the database was not touched


def test_restore_refuses_an_install_that_is_not_empty(source, target, tmp_path):
    _, here = source
    backup = tmp_path / "backup"
    manage(here, "backup", str(backup))
    manage(target, "migrate", "-v0")

    refused = manage(target, "restore", str(backup), ok=False)
    assert refused.returncode == 1
    assert (
        "is not empty" in refused.stderr and "restore goes onto an empty install" in refused.stderr
    )


def test_a_backup_goes_into_a_new_directory(source, tmp_path):
    _, here = source
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    refused = manage(here, "backup", str(tmp_path / "full"), ok=False)
    assert "is not empty: a backup goes into a new directory" in refused.stderr
