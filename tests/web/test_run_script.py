"""`make run` on the embedded default: the web server and a real worker, as a newcomer gets them.

Runs scripts/run.sh (what `make run` calls) in a fresh data directory with no DATABASE_URL and
no REDIS_URL, queues a signal from another process, and waits for the worker to triage it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_make_run_serves_pages_and_its_worker_processes_effects(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    port = free_port()
    env |= {
        "EPHYRA_DATA_DIR": str(tmp_path / "data"),
        "EPHYRA_ADDR": f"127.0.0.1:{port}",
        "EPHYRA_POLL_MS": "100",
        "DEBUG": "true",
        "BIN": str(Path(sys.executable).parent),
        "DJANGO_SETTINGS_MODULE": "ephyra.settings",
    }
    env.pop("EPHYRA_DOORBELL", None)  # the real default: the doorbell rings
    repo = tmp_path / "shop"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "init",
        ],
        check=True,
    )
    run = subprocess.Popen(
        ["sh", "scripts/run.sh"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert run.poll() is None, run.stdout.read()
                assert time.monotonic() < deadline, "the web server did not come up"
                time.sleep(0.2)

        manage = [sys.executable, "manage.py"]
        subprocess.run(
            [*manage, "workspace", "add", "shop", str(repo)],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        events = tmp_path / "events.jsonl"
        signal_event = {
            "type": "signal_sensed",
            "id": "e1",
            "quest": "q1",
            "at": "2026-12-03T10:00:00Z",
            "signal": {"id": "s1", "fingerprint": "fp1", "severity": "error", "title": "boom"},
        }
        events.write_text(json.dumps(signal_event) + "\n")
        queued = subprocess.run(
            [*manage, "apply_events", "shop", str(events), "--submit"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        assert '"queued": "pending"' in queued.stdout

        database = tmp_path / "data" / "ephyra.sqlite3"
        state = None
        while time.monotonic() < deadline and state != "triaged":
            with sqlite3.connect(database) as db:
                row = db.execute("SELECT state FROM quests_quest WHERE quest_id='q1'").fetchone()
            state = row and row[0]
            time.sleep(0.2)
        assert state == "triaged"  # the worker applied the signal, ran triage, fed it back
        with sqlite3.connect(database) as db:
            ops = db.execute("SELECT type, state FROM ledger_operation ORDER BY id").fetchall()
        assert ops[0] == ("run_triage", "succeeded")
    finally:
        os.killpg(run.pid, signal.SIGTERM)
        out, _ = run.communicate(timeout=30)
    assert "worker pid" in out
