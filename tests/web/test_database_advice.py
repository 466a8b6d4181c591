"""A newcomer whose PostgreSQL database is missing, or whose server is down, reads one line
that says what to do, not a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]


def manage(database_url: str | None, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL", "EPHYRA_DATA_DIR"}
    }
    env |= {"EPHYRA_DATA_DIR": str(tmp_path)}
    if database_url:
        env["DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_missing_database_is_one_line_that_says_how_to_create_it(tmp_path):
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        pytest.skip("needs a PostgreSQL server: DATABASE_URL is not a postgres:// URL")
    server = urlsplit(url)
    missing = urlunsplit(server._replace(path="/ephyra_never_created", query=""))
    done = manage(missing, tmp_path, "migrate")
    assert done.returncode == 1
    host, port = server.hostname, server.port or 5432
    user = f" -U {server.username}" if server.username else ""
    assert done.stderr == (
        f"The database 'ephyra_never_created' does not exist on the PostgreSQL server at "
        f"{host}:{port} (DATABASE_URL). Create it with: createdb -h {host} -p {port}{user} "
        "ephyra_never_created\n"
    )
    assert done.stdout == ""


def test_a_server_that_does_not_answer_is_one_line_without_the_password(tmp_path):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = manage(f"postgres://ephyra:s3cret-pw@127.0.0.1:{port}/ephyra", tmp_path, "migrate")
    assert done.returncode == 1
    assert done.stderr == (
        f"Cannot reach a PostgreSQL server at 127.0.0.1:{port} (DATABASE_URL): start it, or "
        "unset DATABASE_URL to use SQLite in the data directory.\n"
    )


def test_a_command_before_migrate_says_to_migrate(tmp_path):
    done = manage(None, tmp_path, "ledger", "status")
    assert done.returncode == 1
    assert done.stderr == (
        "The database has no table quests_workspace yet: run "
        "`.venv/bin/python manage.py migrate` first (`make run` does).\n"
    )
