"""``LocalRunner``: a command as a plain subprocess of the worker, under limits.

What it isolates: the environment (only what the request gives, plus ``PATH`` and ``HOME``),
stdin (``/dev/null``), the process group (killed as one at the end), and per-process resources
(``setrlimit``). What it does not: the file system and the network are the worker's own.
Use ``SandboxRunner`` for code that is not trusted as much as the worker itself.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ephyra.core.ports import RunRequest, RunResult
from ephyra.runner.artifacts import output_path, record_path, write_record
from ephyra.runner.capture import Capture
from ephyra.runner.process import execute

# Added when the request's environment has no PATH: the system's directories, nothing else.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
EXCERPT_HEAD = 4 * 1024
EXCERPT_TAIL = 12 * 1024  # the end of a test run says more than its beginning


class LocalRunner:
    """Runs a request as a subprocess; see ``ephyra.core.ports.Runner`` for the contract.

    The environment is ``request.env`` and nothing else, except that ``PATH`` defaults to
    ``DEFAULT_PATH`` and ``HOME`` and ``TMPDIR`` default to a fresh private directory made for
    the run and removed after it (so a tool's caches and temporary files neither land in the
    worktree nor outlive the run)."""

    name = "local"

    def __init__(self, *, kill_grace_seconds: float = 2.0) -> None:
        self.kill_grace_seconds = kill_grace_seconds

    def run(
        self, request: RunRequest, *, should_stop: Callable[[], bool] | None = None
    ) -> RunResult:
        cwd = working_directory(request)
        env = dict(request.env)
        env.setdefault("PATH", DEFAULT_PATH)
        home = None
        if "HOME" not in env or "TMPDIR" not in env:
            home = tempfile.mkdtemp(prefix="ephyra-run-")
            env.setdefault("HOME", home)
            env.setdefault("TMPDIR", home)
        output = output_path(request)
        try:
            outcome = execute(
                request.argv,
                cwd=cwd,
                env=env,
                limits=request.limits,
                capture=new_capture(request),
                kill_grace=self.kill_grace_seconds,
                should_stop=should_stop,
            )
        finally:
            if home is not None:
                shutil.rmtree(home, ignore_errors=True)
        result = outcome.result(self.name, request, env, output)
        write_record(result, record_path(request))
        return result


def working_directory(request: RunRequest) -> str:
    """The request's working directory, resolved; a ``ValueError`` when it is not one."""
    path = Path(request.cwd)
    if not path.is_absolute():
        raise ValueError(f"the working directory must be an absolute path, not {request.cwd!r}")
    if not path.is_dir():
        raise ValueError(f"the working directory {request.cwd} does not exist")
    return str(path.resolve())


def new_capture(request: RunRequest) -> Capture:
    """The capture for a request's output, in its artifacts directory (made if missing)."""
    Path(request.artifacts_dir).mkdir(parents=True, exist_ok=True)
    return Capture(
        output_path(request),
        keep=request.limits.output_bytes,
        excerpt_head=EXCERPT_HEAD,
        excerpt_tail=EXCERPT_TAIL,
    )
