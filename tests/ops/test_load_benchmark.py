"""benchmarks/load.py refuses the embedded default, and on PostgreSQL and Redis runs at a tiny
rate through real gunicorn and worker processes and prints its whole table. No timing is
asserted: the figures only mean something at full size (docs/observability.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = os.environ.get("DATABASE_URL", "").startswith("postgres") and os.environ.get("REDIS_URL")


def load(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    return subprocess.run(
        [sys.executable, "benchmarks/load.py", *args],
        cwd=ROOT,
        env=base | env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_without_postgresql_and_redis_it_refuses_to_run():
    refused = load("--seconds", "1")
    assert refused.returncode == 1
    assert "benchmarks/load.py needs PostgreSQL and Redis" in refused.stderr
    assert load(DATABASE_URL="sqlite:////tmp/x.sqlite3", REDIS_URL="redis://x").returncode == 1


@pytest.mark.skipif(not SERVICES, reason="needs DATABASE_URL=postgres://… and REDIS_URL")
def test_a_short_run_stores_every_accepted_record_and_prints_its_table():
    run = load(
        "--rate",
        "100",
        "--seconds",
        "3",
        "--web-workers",
        "2",
        DATABASE_URL=os.environ["DATABASE_URL"],
        REDIS_URL=os.environ["REDIS_URL"],
    )
    lines = run.stdout.splitlines()
    assert lines and lines[0].startswith("# load: 100 records/s for 3 s in exports of 100"), (
        run.stdout + run.stderr
    )
    cells = {
        row.split("|")[1].strip(): row.split("|")[2].strip()
        for row in lines
        if row.startswith("| ") and row.count("|") == 3
    }
    assert cells["exports sent"].startswith("3 ")
    assert cells["records accepted"] == cells["records stored (signals)"] == "300"
    assert cells["received per /metrics"] == "300" and cells["refused per /metrics"] == "0"
    assert "- target nothing lost: met" in lines
    assert any(line.startswith("- target p99 < 1 s: ") for line in lines)
