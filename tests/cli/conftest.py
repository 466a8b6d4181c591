"""The real ``ephyra`` console script, run as a subprocess: with a home of its own (its config
file under tmp_path), no EPHYRA_* or NO_COLOR from the test run, and, for the server commands,
against Django's live server with a worker thread applying what people submit."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "ephyra"


@dataclass
class Ran:
    code: int
    out: str
    err: str


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("EPHYRA_", "DJANGO_")) and k not in ("NO_COLOR", "FORCE_COLOR")
    }
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
    return env


@pytest.fixture
def ephyra(cli_env):
    """Run ``ephyra ARGS``; ``env`` adds variables, ``stdin`` feeds it."""
    if not SCRIPT.exists():
        pytest.fail(f"{SCRIPT} is missing: install the package (make .venv/.installed)")

    def run(*args: str, env: dict[str, str] | None = None, stdin: str = "", timeout=60) -> Ran:
        done = subprocess.run(
            [str(SCRIPT), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env={**cli_env, **(env or {})},
            timeout=timeout,
            check=False,
        )
        return Ran(done.returncode, done.stdout, done.stderr)

    return run


@pytest.fixture
def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
