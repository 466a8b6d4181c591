"""``SandboxRunner``: the same command as ``LocalRunner``, inside bubblewrap (``bwrap``).

The sandbox has every namespace of its own (user, mount, PID, network, IPC, UTS, cgroup), so it
has no network at all (only its own loopback), sees only its own processes, and dies whole
when the worker does (``--die-with-parent``). Its file system is built from nothing:

- ``/usr`` read-only, and ``/bin``, ``/sbin``, ``/lib*`` as the host has them (symlinks into
  ``/usr`` on a merged-/usr system, read-only binds otherwise);
- from ``/etc`` only what programs need to start and find users, libraries, time zones and
  CA certificates (``ETC``), read-only; never ``/etc/ssl/private``, ``pip.conf`` or
  ``gitconfig``;
- a fresh ``/proc`` and a minimal ``/dev``, a private ``/tmp`` (tmpfs, gone after the run);
- the worktree, read-write, at the same path as on the host (so paths in its output and in
  files it writes, a virtual environment's scripts say, mean the same inside and out);
- the ``read_only_paths`` given to the runner (a toolchain under ``/opt``, say), read-only.

Nothing else: not ``/root``, ``/home``, ``/srv``, ``/var``, nor Ephyra's data directory (only
the worktree inside it, on an otherwise empty skeleton of its parents). All capabilities are
dropped, the command gets a new session (no writing to the worker's terminal), and its
environment is cleared and set to the request's. The environment reaches bubblewrap through a
memory file (``--args``), not its command line, where any user of the host could read it.

A program installed outside ``/usr`` (pyenv's Python under ``/root``, a virtual environment
made outside the sandbox) is not there: a workspace's setup runs through the same runner as its
tests and builds its environment inside the worktree. ``docs/work.md`` says how to install
bubblewrap and what a host needs for it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from ephyra.core.ports import RunnerUnavailable, RunRequest, RunResult
from ephyra.runner.artifacts import output_path, record_path, write_record
from ephyra.runner.capture import Capture
from ephyra.runner.local import DEFAULT_PATH, new_capture, working_directory
from ephyra.runner.process import execute

# What of /etc a program needs: users and groups, name lookup of localhost, the dynamic
# linker's cache, time zone, the Debian alternatives (/usr/bin/java is a link through them),
# CA certificates (not the private keys beside them), Debian's Python configuration.
ETC = (
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "alternatives",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "mime.types",
    "os-release",
    "python3",
)
# Where the pieces of a root file system live beside /usr.
TOP_LEVEL = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
HOSTNAME = "ephyra-sandbox"
# The command starts through the sandbox's shell, which replaces itself with it: a command that
# is not there exits 127 and one that cannot be executed 126, as with the local runner (bwrap
# alone would exit 1 for both).
_SHELL_EXEC = ("/bin/sh", "-c", 'exec "$@"', "sh")

INSTALL = (
    "install bubblewrap (Debian and Ubuntu: apt-get install bubblewrap) or give the path of "
    "its bwrap executable"
)
ENABLE = (
    "bubblewrap needs unprivileged user namespaces: on Debian `sysctl "
    "kernel.unprivileged_userns_clone=1`; on Ubuntu 23.10 and later an AppArmor profile for "
    "bwrap or `sysctl kernel.apparmor_restrict_unprivileged_userns=0`; everywhere "
    "`user.max_user_namespaces` above 0; in a container, a seccomp and AppArmor profile that "
    "allows creating namespaces (see docs/work.md)"
)

_probes: dict[str, str] = {}  # bwrap path -> "" when it works, else why not
_probes_lock = threading.Lock()


class SandboxRunner:
    """Runs a request inside bubblewrap; see ``ephyra.core.ports.Runner`` for the contract.

    ``PATH`` defaults to ``DEFAULT_PATH`` and ``HOME`` to ``/tmp`` (private to the run).
    Before its first run (or on ``check()``) it runs ``bwrap … true`` once per process and
    bwrap path; if bubblewrap is missing or cannot build its sandbox, every run raises
    ``RunnerUnavailable`` saying what to install or enable. It never runs anything outside
    the sandbox instead."""

    name = "sandbox"

    def __init__(
        self,
        *,
        bwrap: str = "bwrap",
        read_only_paths: Sequence[str] = (),
        kill_grace_seconds: float = 2.0,
    ) -> None:
        for path in read_only_paths:
            if not os.path.isabs(path) or not os.path.exists(path):
                raise ValueError(f"a read-only path must be absolute and exist: {path!r}")
        self.bwrap = bwrap
        self.read_only_paths = tuple(read_only_paths)
        self.kill_grace_seconds = kill_grace_seconds

    def check(self) -> str:
        """The bwrap executable this runner uses, once it is known to work here; raises
        ``RunnerUnavailable`` otherwise."""
        found = shutil.which(self.bwrap)
        if found is None:
            raise RunnerUnavailable(f"the sandbox cannot run: no {self.bwrap!r} found; {INSTALL}")
        with _probes_lock:
            if found not in _probes:
                _probes[found] = _probe(found)
            problem = _probes[found]
        if problem:
            raise RunnerUnavailable(f"the sandbox cannot run: {problem}")
        return found

    def run(
        self, request: RunRequest, *, should_stop: Callable[[], bool] | None = None
    ) -> RunResult:
        bwrap = self.check()
        cwd = working_directory(request)
        env = dict(request.env)
        env.setdefault("PATH", DEFAULT_PATH)
        env.setdefault("HOME", "/tmp")
        arguments = [
            *layout(cwd, self.read_only_paths),
            "--clearenv",
            *(word for name, value in env.items() for word in ("--setenv", name, value)),
        ]
        capture: Capture = new_capture(request)
        with _argument_file(arguments) as fd:
            outcome = execute(
                [bwrap, "--args", str(fd), "--", *_SHELL_EXEC, *request.argv],
                cwd=cwd,
                env={},  # bwrap itself needs nothing; the command's environment is in --args
                limits=request.limits,
                capture=capture,
                kill_grace=self.kill_grace_seconds,
                should_stop=should_stop,
                pass_fds=(fd,),
            )
        result = outcome.result(self.name, request, env, output_path(request))
        write_record(result, record_path(request))
        return result


def layout(worktree: str, read_only_paths: Iterable[str] = ()) -> list[str]:
    """bwrap's arguments for the sandbox around ``worktree``, up to the command."""
    args = [
        *("--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"),
        *("--hostname", HOSTNAME),
        *("--ro-bind", "/usr", "/usr"),
    ]
    for top in TOP_LEVEL:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for name in ETC:
        path = f"/etc/{name}"
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    for path in sorted(Path("/etc").glob("python3.*")):
        args += ["--ro-bind", str(path), str(path)]
    # /tmp before the binds: a worktree or a toolchain under /tmp must not be hidden by it.
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in read_only_paths:
        args += ["--ro-bind", path, path]
    args += ["--bind", worktree, worktree]
    # Last: the root itself (a tmpfs holding the mount points) becomes read-only, so a write
    # anywhere but the worktree, /tmp and /dev fails instead of vanishing with the sandbox.
    args += ["--remount-ro", "/", "--chdir", worktree]
    return args


def _probe(bwrap: str) -> str:
    """Build a sandbox around an empty directory and run ``true`` in it: "" when that works."""
    with tempfile.TemporaryDirectory(prefix="ephyra-probe-") as empty:
        try:
            done = subprocess.run(
                [bwrap, *layout(empty), "--clearenv", "--", "true"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env={},
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{bwrap} did not start a sandbox ({error}); {INSTALL}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        return f"{bwrap} could not build its sandbox here ({said}); {ENABLE}"
    return ""


@contextlib.contextmanager
def _argument_file(arguments: Sequence[str]) -> Iterator[int]:
    """A memory file holding bwrap's arguments, each ended by NUL, for ``--args``."""
    fd = os.memfd_create("ephyra-bwrap-args")
    try:
        with open(fd, "wb", closefd=False) as file:
            file.write(b"".join(word.encode() + b"\0" for word in arguments))
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)
