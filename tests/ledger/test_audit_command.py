"""``manage.py audit verify|anchor|show``: what it prints and how it exits, in process and as a
real ``manage.py`` run against its own database."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from io import StringIO
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from ephyra.replay import read_events
from journal.anchor import read_anchor
from journal.store import Journal
from ledger.audit import audit_anchor
from ledger.models import AuditEntry
from quests.engine import quest_apply
from quests.models import Workspace
from tests.audit_tampering import audit_triggers_disabled

ROOT = Path(__file__).resolve().parents[2]
MAIN_LINE = ROOT / "docs" / "examples" / "main-line.jsonl"
EDITED = "entry #9 was edited: its content does not match its hash"


def main_line():
    with MAIN_LINE.open() as handle:
        return list(read_events(handle))


def make_workspace(tmp_path, slug: str, events) -> Workspace:
    path = tmp_path / f"{slug}.git"
    Journal.init(path, bare=True)
    workspace = Workspace.objects.create(slug=slug, name=slug, repository=str(path))
    for event in events:
        quest_apply(workspace, event)
    return workspace


def audit(*args: str) -> str:
    out = StringIO()
    call_command("audit", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def two(tmp_path, db):
    """``alpha`` anchored at its head (#16); ``beta`` never anchored (#6, no commit yet)."""
    alpha = make_workspace(tmp_path, "alpha", main_line())
    audit_anchor(alpha)
    beta = make_workspace(tmp_path, "beta", main_line()[:6])
    return alpha, beta


def test_verify_prints_one_line_per_workspace_and_exits_zero(two):
    assert audit("verify") == (
        "alpha: verified 16 entries (anchored at #16)\n"
        "beta: verified 6 entries (not anchored yet)\n"
    )
    assert audit("verify", "--workspace", "beta") == "beta: verified 6 entries (not anchored yet)\n"


def test_verify_names_the_first_broken_entry_and_exits_one(two):
    alpha, _ = two
    with audit_triggers_disabled():
        AuditEntry.objects.filter(workspace=alpha, sequence=9).update(actor="mallory")
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("audit", "verify", stdout=out)
    assert failed.value.returncode == 1
    assert str(failed.value) == (
        "1 of 2 audit logs do not verify (docs/audit.md says what each message means)"
    )
    assert out.getvalue() == (
        f"alpha: BROKEN: {EDITED}\nbeta: verified 6 entries (not anchored yet)\n"
    )


def test_verify_finds_a_truncated_tail_through_the_anchor(two):
    alpha, _ = two
    with audit_triggers_disabled():
        AuditEntry.objects.filter(workspace=alpha, sequence__gt=14).delete()
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("audit", "verify", "--workspace", "alpha", stdout=out)
    assert out.getvalue() == (
        "alpha: BROKEN: the log ends at entry #14 but the anchor in Git names entry #16: "
        "entries #15 to #16 were truncated\n"
    )


def test_an_unknown_workspace_is_named(db):
    with pytest.raises(CommandError, match="no workspace 'nope'"):
        audit("verify", "--workspace", "nope")
    with pytest.raises(CommandError, match="no workspace 'nope'"):
        audit("show", "--workspace", "nope")


def test_anchor_writes_the_head_once_and_then_has_nothing_to_do(two):
    _, beta = two
    first = audit("anchor", "--workspace", "beta")
    commit = read_anchor(beta.repository, "beta").commit
    assert first == f"beta: anchored entry #6 on refs/ephyra/audit/beta ({commit[:12]})\n"
    assert audit("anchor") == "alpha: nothing new to anchor\nbeta: nothing new to anchor\n"


def test_anchor_refuses_a_broken_log_and_exits_one(two):
    _, beta = two
    with audit_triggers_disabled():
        AuditEntry.objects.filter(workspace=beta, sequence=2).update(payload={})
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("audit", "anchor", "--workspace", "beta", stdout=out)
    assert failed.value.returncode == 1
    assert out.getvalue() == (
        "beta: not anchored: entry #2 was edited: its content does not match its hash\n"
    )
    assert read_anchor(beta.repository, "beta") is None


def test_show_prints_the_tail_with_the_anchored_entry_marked(two):
    alpha, _ = two
    lines = audit("show", "--workspace", "alpha", "--tail", "2").splitlines()
    last = AuditEntry.objects.get(workspace=alpha, sequence=16)
    assert len(lines) == 4
    assert lines[0].startswith("#15  2026-11-30T")
    assert lines[2] == (
        f"#16  {last.at.isoformat()}  {last.actor}  quest.usage_recorded  quest:checkout-500  "
        f"{last.entry_hash}  [anchored]"
    )
    assert lines[3].startswith('    {"effects": [], "event": "e016"')


def test_show_refuses_a_tail_below_one(two):
    with pytest.raises(CommandError, match="--tail must be at least 1, got 0"):
        audit("show", "--workspace", "alpha", "--tail", "0")


# --- a real manage.py, its own database ----------------------------------------------------


@pytest.fixture
def cli_env(tmp_path):
    """The environment of a manage.py run with a database of its own: a SQLite file, or a
    fresh PostgreSQL database beside the test database when the suite runs on PostgreSQL."""
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "ephyra.settings",
        "SECRET_KEY": "tests-only-key-that-signs-nothing-real",
        "EPHYRA_DATA_DIR": str(tmp_path / "data"),
        "EPHYRA_DOORBELL": "false",
    }
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        yield env | {"DATABASE_URL": f"sqlite:///{tmp_path / 'cli.sqlite3'}"}
        return
    import psycopg

    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/')}_audit_cli"
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield env | {"DATABASE_URL": urlunsplit(parts._replace(path=f"/{name}"))}
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_manage_py_audit_verify_exits_zero_then_one_after_tampering(cli_env, tmp_path):
    source = tmp_path / "src"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@x", "-C", str(source)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(source)], check=True)
    (source / "app.py").write_text("print('hi')\n")
    subprocess.run([*git, "add", "app.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)

    vendor = manage(
        cli_env, "shell", "-v", "0", "-c", "from django.db import connection as c; print(c.vendor)"
    )
    assert vendor.stdout == f"{connection.vendor}\n"  # the same database as the suite's
    for args in (
        ["migrate", "-v", "0"],
        ["workspace", "add", "shop", str(source)],
        ["apply_events", "shop", str(MAIN_LINE)],
    ):
        done = manage(cli_env, *args)
        assert done.returncode == 0, done.stderr

    verified = manage(cli_env, "audit", "verify")
    assert (verified.returncode, verified.stdout) == (
        0,
        "shop: verified 16 entries (anchored at #12)\n",
    )
    mirror = tmp_path / "data" / "mirrors" / "shop.git"
    log = subprocess.run(
        ["git", "--git-dir", str(mirror), "log", "--format=%s", "refs/ephyra/audit/shop"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert log.stdout.splitlines() == [
        f"audit shop: anchored at entry #{n} (quest.checkpoint_decided)" for n in (12, 7, 5)
    ]

    refused = manage(
        cli_env,
        "shell",
        "-c",
        "from ledger.models import AuditEntry\n"
        "AuditEntry.objects.filter(sequence=9).update(actor='mallory')\n",
    )
    assert refused.returncode != 0
    assert "ledger_auditentry is append-only: UPDATE refused." in refused.stderr

    tamper = textwrap.dedent(
        """
        from ledger.models import AuditEntry
        from tests.audit_tampering import audit_triggers_disabled
        with audit_triggers_disabled():
            AuditEntry.objects.filter(sequence=9).update(actor="mallory")
        """
    )
    assert manage(cli_env, "shell", "-c", tamper).returncode == 0
    broken = manage(cli_env, "audit", "verify", "--workspace", "shop")
    assert (broken.returncode, broken.stdout) == (1, f"shop: BROKEN: {EDITED}\n")
    assert broken.stderr == (
        "CommandError: 1 of 1 audit logs do not verify (docs/audit.md says what each message "
        "means)\n"
    )
