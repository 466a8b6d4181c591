"""benchmarks/ingest_http.py runs at a tiny size, as a script, through its real HTTP server and
database, and prints its whole table. No timing is asserted: the figures only mean something at
full size on a quiet machine (``make bench``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_http_benchmark_stores_every_record_and_prints_a_row_per_format():
    run = subprocess.run(
        [sys.executable, "benchmarks/ingest_http.py", "--records", "200", "--batch", "100"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("# ingest over HTTP: 200 error log records in exports of 100")
    assert lines[0].endswith("each format into the same empty tables")
    for fmt in ("protobuf", "json"):
        row = next(line for line in lines if line.startswith(f"| {fmt} |"))
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[1] == "2"  # two exports of 100
        assert cells[-2].endswith("x")  # the ratio to parse_logs alone
        # the repeats of a fingerprint are folded into one counted quest event per export
        assert 0 < int(cells[-1]) < 200
    assert "- every record was stored as a signal (2 formats x 200)." in lines
