"""The ingest benchmark runs at a tiny size, as a script, and prints its whole table. No timing
is asserted: the figures only mean something at full size on a quiet machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks import ingest as bench
from ephyra.telemetry import JSON, PROTOBUF, parse_logs

ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_script_prints_every_row_and_the_target():
    run = subprocess.run(
        [
            sys.executable,
            "benchmarks/ingest.py",
            "--records",
            "250",
            "--batch",
            "100",
            "--repeat",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    for fmt, name in [
        ("protobuf", bench.OURS),
        ("protobuf", bench.PB_BASE),
        ("json", bench.OURS),
        ("json", bench.JF_BASE),
        ("json", bench.JSON_BASE),
    ]:
        assert any(line.startswith(f"| {fmt} | {name} |") for line in lines), (fmt, name)
    assert sum(line.startswith("target: ") for line in lines) == 2
    assert "both formats gave identical candidates" in run.stdout


def test_the_workload_is_real_errors_in_four_languages_with_secrets():
    records = bench.build_records(50)
    assert {r.language for r in records} == {"python", "java", "javascript", "go"}
    body = bench.encode_protobuf(records)
    result = parse_logs(body, PROTOBUF)
    assert result.records == len(result.candidates) == 50
    assert {c.language for c in result.candidates} == {"python", "java", "javascript", "go"}
    assert all(c.frames for c in result.candidates)
    assert parse_logs(bench.encode_json(records), JSON).candidates == result.candidates
    assert any("[redacted:" in c.message for c in result.candidates)
