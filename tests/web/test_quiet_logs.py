"""What a person reads in the logs: no line per doorbell, no warning on every submit.

A real worker (``manage.py worker``: Celery on the filesystem broker, the embedded default) and
a real submit (``apply_events --submit``). The worker polls only every ten minutes here, so the
event it applies is the one its doorbell rang for.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Celery's "Task ledger.ring[<id>] received" and "... succeeded in 0.0002s: None".
TASK_LINE = re.compile(r"Task \S+\[[0-9a-f-]+\] (received|succeeded)")
NO_HOSTNAME = "No hostname was supplied"


def wait_for(predicate, what: str, worker: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while not predicate():
        assert worker.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"{what}; the worker said:\n{log.read_text()}"
        time.sleep(0.2)


def test_a_submit_and_the_doorbell_it_rings_log_no_noise(tmp_path, git_repository):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "EPHYRA_DOORBELL"}
    }
    env |= {"EPHYRA_DATA_DIR": str(tmp_path / "data"), "EPHYRA_POLL_MS": "600000"}
    manage = [sys.executable, "manage.py"]

    def run(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [*manage, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done

    run("migrate", "--no-input", "-v", "0")
    run("workspace", "add", "shop", str(git_repository()))
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [*manage, "worker"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: "serves shop" in log.read_text(), "no lease taken", worker, log)
        event = {
            "type": "signal_sensed",
            "id": "e1",
            "quest": "q1",
            "at": "2026-12-03T10:00:00Z",
            "signal": {"id": "s1", "fingerprint": "fp1", "severity": "error", "title": "boom"},
        }
        events = tmp_path / "events.jsonl"
        events.write_text(json.dumps(event) + "\n")
        submitted = run("apply_events", "shop", str(events), "--submit")

        def applied() -> bool:
            with sqlite3.connect(tmp_path / "data" / "ephyra.sqlite3") as db:
                row = db.execute("SELECT state FROM ledger_inboundevent").fetchone()
            return row == ("applied",)

        wait_for(applied, "the doorbell did not wake the worker", worker, log)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
    said = log.read_text()
    assert "serves shop" in said  # the worker's own lines are still there
    assert NO_HOSTNAME not in submitted.stdout + submitted.stderr
    assert NO_HOSTNAME not in said
    assert TASK_LINE.findall(said) == []
