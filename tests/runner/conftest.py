"""Runners run real commands here: the local one always, the sandbox where bubblewrap works."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ephyra.core.ports import RunLimits, RunnerUnavailable, RunRequest
from ephyra.runner import DEFAULT_PATH, LocalRunner, SandboxRunner


def sandbox_problem() -> str:
    try:
        SandboxRunner().check()
    except RunnerUnavailable as error:
        return str(error)
    return ""


SANDBOX_PROBLEM = sandbox_problem()
needs_sandbox = pytest.mark.skipif(bool(SANDBOX_PROBLEM), reason=SANDBOX_PROBLEM)
# The commands use the system's Python: the one a sandbox can see.
needs_python = pytest.mark.skipif(
    shutil.which("python3", path=DEFAULT_PATH) is None, reason=f"no python3 on {DEFAULT_PATH}"
)


@pytest.fixture(params=["local", pytest.param("sandbox", marks=needs_sandbox)])
def runner(request):
    """Each runner in turn: what both promise is tested on both."""
    return LocalRunner() if request.param == "local" else SandboxRunner()


@pytest.fixture
def worktree(tmp_path) -> Path:
    path = tmp_path / "data" / "worktrees" / "q-1" / "r1"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def artifacts(tmp_path) -> Path:
    return tmp_path / "artifacts"


@pytest.fixture
def make_request(worktree, artifacts):
    def make(argv, *, name="run", env=None, **limits) -> RunRequest:
        return RunRequest(
            argv=tuple(argv),
            cwd=str(worktree),
            artifacts_dir=str(artifacts),
            name=name,
            env=env or {},
            limits=RunLimits(**limits),
        )

    return make


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker`` (a zombie's command line is empty)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found
