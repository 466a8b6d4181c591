"""The effectiveness benchmark, at its smallest: one injected regression of a pinned project goes
from production's traceback (over OTLP, to a live server) to a proven fix on the remote, and a
distribution that is not the pinned one is refused. The first run downloads the project's source
distribution from the package index into ``.ephyra/bench-cache``; timings are not asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.effectiveness_cases import PROJECTS
from benchmarks.effectiveness_repos import PinMismatch, fetch

ROOT = Path(__file__).resolve().parents[1]


def test_a_cached_distribution_whose_digest_is_not_the_pinned_one_is_refused(tmp_path):
    project = PROJECTS["inflection"]
    folder = tmp_path / f"{project.name}-{project.version}"
    folder.mkdir()
    forged = folder / f"{project.name}-{project.version}.tar.gz"
    forged.write_bytes(b"not the released archive")
    with pytest.raises(PinMismatch, match=f"pinned {project.sha256}; refusing it"):
        fetch(project, tmp_path)
    assert forged.read_bytes() == b"not the released archive"  # left for a person to see


def test_one_regression_is_located_and_its_proven_fix_lands_without_breaking_the_suite():
    run = subprocess.run(
        [sys.executable, "benchmarks/effectiveness.py", "--cases", "1", "--timeout", "240"],
        cwd=ROOT, capture_output=True, text=True, timeout=420,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    row = next(line for line in run.stdout.splitlines() if line.startswith("| inflection |"))
    # project, case, culprit located, proven fix landed, conflict, wrong landing
    assert row.split("|")[1:7] == [
        " inflection ", " ordinal-default ", " yes ", " yes ", " - ", " no "
    ]
    assert "culprit located: 1/1 (target: all)" in run.stdout
    assert "wrong landings: 0 (target: 0)" in run.stdout
