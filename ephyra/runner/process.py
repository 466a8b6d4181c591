"""One process group run to its end under limits: what the local and the sandboxed runner share.

The command starts through a few lines of Python (``_SHIM``) that set its resource limits and
then replace themselves with it (``exec``), keeping its process id. Setting limits there, rather
than in a ``preexec_fn``, keeps the parent free of Python code run between ``fork`` and
``exec``, which can deadlock a process that has threads (a worker may).

While the command runs, the parent reads its combined stdout and stderr (one pipe) into a
``Capture``, and waits on the pipe and on a pidfd of the command at once, so it wakes as soon as
either has something to say and never polls. At the wall-clock limit (or when asked to stop)
the whole process group gets SIGTERM, then SIGKILL after a short grace. When the command's
first process ends, whatever else is left in its group is killed too: a run leaves nothing
behind.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ephyra.core.ports import RunLimits, RunRequest, RunResult
from ephyra.runner.capture import Capture, Captured

# How long the output pipe is read after the command's first process ended and its group was
# killed: the pipe closes as soon as the last process holding it is gone; one that left the
# group (by calling setsid itself) is not waited for past this.
DRAIN_SECONDS = 2.0
# How often ``should_stop`` is asked.
STOP_CHECK_SECONDS = 0.5

# setrlimit for each limit of RunLimits that the kernel enforces per process.
_RLIMITS = {
    "cpu_seconds": "RLIMIT_CPU",
    "address_space_bytes": "RLIMIT_AS",
    "file_size_bytes": "RLIMIT_FSIZE",
    "open_files": "RLIMIT_NOFILE",
    "processes": "RLIMIT_NPROC",
}

# argv: the parent's pid, the limits as NAME=soft:hard,..., the command's LC_CTYPE ("=value", or
# "-" for none), then the command. Exit 127 for a command not found and 126 for one that cannot
# be executed, as a shell does.
_SHIM = r"""
import ctypes, os, resource, sys
# Python sets LC_CTYPE when it starts in the C locale (PEP 538); the command must get exactly
# the environment it was given.
os.environ.pop("LC_CTYPE", None)
if sys.argv[3] != "-":
    os.environ["LC_CTYPE"] = sys.argv[3][1:]
# PR_SET_PDEATHSIG (1): if the process running us dies, we get SIGKILL (9) instead of running
# on unwatched. It survives exec; the check after it covers a parent that died first.
ctypes.CDLL(None, use_errno=True).prctl(1, 9)
if os.getppid() != int(sys.argv[1]):
    os._exit(125)
for item in filter(None, sys.argv[2].split(",")):
    name, _, value = item.partition("=")
    soft, hard = (int(part) for part in value.split(":"))
    which = getattr(resource, name)
    _, ceiling = resource.getrlimit(which)
    if ceiling != resource.RLIM_INFINITY:
        hard = min(hard, ceiling)
    resource.setrlimit(which, (min(soft, hard), hard))
argv = sys.argv[4:]
try:
    os.execvp(argv[0], argv)
except FileNotFoundError:
    print(f"ephyra runner: {argv[0]}: command not found", file=sys.stderr)
    os._exit(127)
except OSError as error:
    print(f"ephyra runner: {argv[0]}: cannot execute: {error.strerror}", file=sys.stderr)
    os._exit(126)
"""


def rlimit_argument(limits: RunLimits) -> str:
    items = ["RLIMIT_CORE=0:0"]  # no core dumps into the worktree
    for field, name in _RLIMITS.items():
        value = getattr(limits, field)
        if value is None:
            continue
        # One second between the soft and the hard CPU limit: SIGXCPU first, then SIGKILL.
        hard = value + 1 if field == "cpu_seconds" else value
        items.append(f"{name}={value}:{hard}")
    return ",".join(items)


class Outcome:
    def __init__(self) -> None:
        self.started_at = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        self.duration = 0.0
        self.exit_code: int | None = None
        self.signal: str | None = None
        self.timed_out = False
        self.stopped = False
        self.captured: Captured | None = None

    def result(self, runner: str, request: RunRequest, env: Mapping[str, str], output: Path):
        captured = self.captured
        assert captured is not None
        return RunResult(
            runner=runner,
            argv=request.argv,
            cwd=request.cwd,
            env_names=tuple(sorted(env)),
            limits=request.limits,
            started_at=self.started_at,
            duration_seconds=round(self.duration, 3),
            exit_code=self.exit_code,
            signal=self.signal,
            timed_out=self.timed_out,
            stopped=self.stopped,
            output_excerpt=captured.excerpt,
            output_size=captured.size,
            output_sha256=captured.sha256,
            output_path=str(output),
            output_cut=captured.cut,
        )


def execute(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    limits: RunLimits,
    capture: Capture,
    kill_grace: float,
    should_stop: Callable[[], bool] | None,
    pass_fds: Sequence[int] = (),
) -> Outcome:
    """Run ``argv`` in its own session under ``limits`` with exactly ``env``; stdin is
    ``/dev/null``, stdout and stderr go to ``capture``. Returns how it ended; the capture is
    closed."""
    outcome = Outcome()
    shim = [
        *(sys.executable, "-I", "-S", "-c", _SHIM),
        *(str(os.getpid()), rlimit_argument(limits), _lc_ctype(env)),
    ]
    began = time.monotonic()
    try:
        process = subprocess.Popen(
            [*shim, *argv],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session and process group: killed as one
            pass_fds=tuple(pass_fds),
        )
    except BaseException:
        capture.close()
        raise
    try:
        _Watch(process, outcome, capture, began, limits.wall_seconds, kill_grace, should_stop).run()
    finally:
        if process.returncode is None:  # interrupted (an exception in the watch): leave nothing
            _kill_group(process.pid, signal.SIGKILL)
            process.wait()
        assert process.stdout is not None
        process.stdout.close()
        outcome.captured = capture.close()
    outcome.duration = outcome.duration or time.monotonic() - began
    code = process.returncode
    if code < 0:
        outcome.signal = signal.Signals(-code).name
    else:
        outcome.exit_code = code
    return outcome


def _lc_ctype(env: Mapping[str, str]) -> str:
    return "=" + env["LC_CTYPE"] if "LC_CTYPE" in env else "-"


class _Watch:
    """Waits on the output pipe and on a pidfd of the first process at once, and sends the
    signals that come due: SIGTERM to the group at the deadline (or when asked to stop),
    SIGKILL after the grace, SIGKILL to what is left when the first process ends."""

    def __init__(self, process, outcome, capture, began, wall, grace, should_stop) -> None:
        self.process, self.outcome, self.capture = process, outcome, capture
        self.began, self.deadline, self.grace = began, began + wall, grace
        self.should_stop = should_stop
        self.next_check = began
        self.kill_at: float | None = None  # set when SIGTERM was sent
        self.kill_sent = False
        self.reading, self.ended = True, False
        self.drain_until = 0.0

    def run(self) -> None:
        self.out = self.process.stdout.fileno()
        os.set_blocking(self.out, False)
        with contextlib.suppress(OSError):  # a larger pipe: fewer wake-ups for a chatty command
            fcntl.fcntl(self.out, fcntl.F_SETPIPE_SZ, 1 << 20)
        self.pidfd = os.pidfd_open(self.process.pid)
        self.poller = select.poll()
        self.poller.register(self.out, select.POLLIN)
        self.poller.register(self.pidfd, select.POLLIN)
        try:
            while self.reading or not self.ended:
                now = time.monotonic()
                if self.ended and now >= self.drain_until:
                    break
                wake = self.drain_until if self.ended else self._enforce(now)
                for fd, _ in self.poller.poll(max(0, int((wake - now) * 1000) + 1)):
                    if fd == self.out:
                        self._read()
                    elif fd == self.pidfd:
                        self._first_process_ended()
        finally:
            os.close(self.pidfd)

    def _enforce(self, now: float) -> float:
        """Send what is due; return when to look again."""
        outcome = self.outcome
        if self.kill_at is None:
            if now >= self.deadline:
                outcome.timed_out = True
            elif self.should_stop is not None and now >= self.next_check:
                self.next_check = now + STOP_CHECK_SECONDS
                outcome.stopped = bool(self.should_stop())
            if not (outcome.timed_out or outcome.stopped):
                return min(self.deadline, self.next_check if self.should_stop else self.deadline)
            _kill_group(self.process.pid, signal.SIGTERM)
            self.kill_at = now + self.grace
        if not self.kill_sent:
            if now < self.kill_at:
                return self.kill_at
            _kill_group(self.process.pid, signal.SIGKILL)
            self.kill_sent = True
        return now + 1.0  # SIGKILL sent: the pidfd answers soon

    def _read(self) -> None:
        try:
            chunk = os.read(self.out, 1 << 20)
        except BlockingIOError:
            return
        if chunk:
            self.capture.feed(chunk)
        else:  # every process holding the pipe has closed it
            self.poller.unregister(self.out)
            self.reading = False

    def _first_process_ended(self) -> None:
        # It is not reaped yet, so its process group id cannot have been reused: kill what is
        # left of the group, then reap it.
        _kill_group(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.outcome.duration = time.monotonic() - self.began
        self.poller.unregister(self.pidfd)
        self.ended = True
        self.drain_until = time.monotonic() + DRAIN_SECONDS


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
