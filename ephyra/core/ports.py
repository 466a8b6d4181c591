"""Ports: what the engine needs from the outside world, as protocols.

The ledger delivers each effect to the adapter registered for its type. An adapter is told the
effect's ledger key and must use it as its idempotency key, so that the outside world can
recognise a request it has seen. Adapters live outside the core; ``ephyra/compose.py`` picks them.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, Protocol

from ephyra.core.effects import WRITE_EFFECTS, EffectType
from ephyra.core.events import BaseEvent


class EffectRequest(NamedTuple):
    key: str  # the ledger key; the adapter's idempotency key
    type: EffectType
    workspace: str  # the workspace's slug
    quest_id: str
    payload: dict[str, Any]
    attempt: int  # 1 for the first delivery
    # The worker's lease generation: a fencing token for services that can check one.
    generation: int = 0
    # Asks the ledger, right before a write's request leaves, whether this worker still holds
    # the claim. A worker frozen after its claim may wake when another has taken over; a write
    # adapter calls this last, so the window for a stale write is the send itself.
    still_holder: Callable[[], bool] = lambda: True
    # Asked by a long effect (an agent step) between and during its commands: True once it
    # should stop (``stop_agent``, a lost lease, a stopping worker). A runner given it kills the
    # command's process group.
    cancelled: Callable[[], bool] = lambda: False


class EffectResult(NamedTuple):
    """What came of an effect. ``events`` go back to the engine, in order; their ids must be
    derived from the request's key (``outcome_event_id``) so that feeding them again after a
    crash is a redelivery. A ``check`` may also answer ``absent``: the write certainly did not
    happen, so delivering it again is safe."""

    status: Literal["succeeded", "failed", "absent"]
    detail: dict[str, Any] = {}
    events: tuple[BaseEvent, ...] = ()


class EffectFailed(Exception):
    """The adapter knows the effect did not happen (refused before anything was sent, say).
    Any other exception from a write leaves its outcome unknown: ambiguous."""


class ClaimLost(Exception):
    """Raised by an adapter whose ``still_holder()`` said no: nothing was sent."""


class EffectAdapter(Protocol):
    def run(self, request: EffectRequest) -> EffectResult:
        """Do the effect. Raise ``EffectFailed`` when it certainly did not happen."""
        ...

    def check(self, request: EffectRequest) -> EffectResult | None:
        """For an ambiguous write: look whether it landed (did this commit land? does this
        branch exist?). ``None`` when the adapter cannot tell; a person decides then."""
        ...


def retry_safe(effect_type: EffectType) -> bool:
    """Reads and computations may run again; writes never run again without a check."""
    return effect_type not in WRITE_EFFECTS


def outcome_event_id(key: str, index: int) -> str:
    """Events an outcome feeds back are named by the operation, so a second feeding after a
    crash is a redelivery the journal recognises, not a new event."""
    return f"fx-{hashlib.sha256(key.encode()).hexdigest()[:24]}-{index}"


# --- Running commands --------------------------------------------------------------------------
# Every command a step runs (setup, tests, probes, bisect, a coding agent) goes through a Runner.
# The types below are the whole contract; ``ephyra.runner`` holds the local and the sandboxed
# implementation, and ``docs/work.md`` says what each isolates.

_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The limits the kernel enforces per process (setrlimit); the runner maps each to an RLIMIT_*.
_RLIMIT_FIELDS = (
    "cpu_seconds",
    "address_space_bytes",
    "file_size_bytes",
    "open_files",
    "processes",
)


@dataclass(frozen=True, slots=True)
class RunLimits:
    """What one run may use. ``None`` leaves a resource at what the runner's own process has.

    ``cpu_seconds``, ``address_space_bytes``, ``file_size_bytes`` and ``open_files`` hold for
    each process of the run (they are ``setrlimit`` limits, inherited by children).
    ``processes`` is ``RLIMIT_NPROC``, which the kernel counts per user, not per run, and does
    not enforce for root: see ``docs/work.md``. ``output_bytes`` is how much of the combined
    stdout and stderr is kept on disk (half from the head, half from the tail)."""

    wall_seconds: float = 600.0
    cpu_seconds: int | None = 600
    address_space_bytes: int | None = 4 * 1024**3
    file_size_bytes: int | None = 1024**3
    open_files: int | None = 1024
    processes: int | None = 512
    output_bytes: int = 4 * 1024**2

    def __post_init__(self) -> None:
        wall = self.wall_seconds
        if isinstance(wall, bool) or not isinstance(wall, int | float) or not 0 < wall < math.inf:
            raise ValueError(f"wall_seconds must be a positive number, not {wall!r}")
        for name in (*_RLIMIT_FIELDS, "output_bytes"):
            value = getattr(self, name)
            if value is None and name != "output_bytes":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.output_bytes < 2:
            raise ValueError("output_bytes must keep at least one byte of head and one of tail")

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunLimits:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One command to run.

    ``argv`` is executed directly, never through a shell (ask for ``("sh", "-c", script)`` when a
    shell is wanted); its first word is looked up on the run's ``PATH``. ``cwd`` is the working
    directory (a worktree). ``env`` is the whole environment the command sees, already filtered
    by the caller's allowlist: the runner adds only ``PATH`` and ``HOME`` (and, locally,
    ``TMPDIR``) when they are missing, and never copies anything from its own environment.
    The runner writes the combined output to ``<artifacts_dir>/<name>.log`` and the run's
    record to ``<artifacts_dir>/<name>.json`` (a second run under the same name replaces both:
    a step that runs again after a crash overwrites its own artifacts instead of piling up new
    ones)."""

    argv: tuple[str, ...]
    cwd: str
    artifacts_dir: str
    name: str
    env: Mapping[str, str] = field(default_factory=dict)
    limits: RunLimits = field(default_factory=RunLimits)

    def __post_init__(self) -> None:
        argv = tuple(self.argv)
        if not argv or not all(isinstance(word, str) and word for word in argv):
            raise ValueError(f"argv must be a non-empty list of non-empty strings, not {argv!r}")
        if any("\0" in word for word in argv):
            raise ValueError("argv must not contain NUL characters")
        if not _RUN_NAME.fullmatch(self.name):
            raise ValueError(
                f"run name {self.name!r} must be 1-128 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
        env = dict(self.env)
        for key, value in env.items():
            if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
                raise ValueError(f"environment variable name {key!r} is not a valid name")
            if not isinstance(value, str) or "\0" in value:
                raise ValueError(f"environment variable {key} must be a string without NUL")
        object.__setattr__(self, "argv", argv)
        object.__setattr__(self, "env", MappingProxyType(env))


@dataclass(frozen=True, slots=True)
class RunResult:
    """What came of a run, and its record: ``to_dict()`` is what is stored beside the output.

    ``exit_code`` is ``None`` when a signal ended the command, and ``signal`` then names it
    (``"SIGKILL"``, ``"SIGXCPU"``…). In the sandbox a command killed by a signal shows, as in a
    shell, as exit ``128 + n`` from bubblewrap; ``signal`` is set there only when the runner
    itself killed the sandbox. ``timed_out`` is true when the wall-clock limit ended it,
    ``stopped`` when the caller asked it to stop. ``output_excerpt`` is the head and the tail
    of the output, decoded as UTF-8, with one line saying how many bytes were cut between them;
    ``output_size`` and ``output_sha256`` describe the whole output as the command wrote it,
    ``output_path`` the file that keeps a capped copy of it. Only the names of the environment
    variables are recorded, never their values. The excerpt is not redacted here: whoever
    stores the record where people read it redacts it first."""

    runner: str
    argv: tuple[str, ...]
    cwd: str
    env_names: tuple[str, ...]
    limits: RunLimits
    started_at: str
    duration_seconds: float
    exit_code: int | None
    signal: str | None
    timed_out: bool
    stopped: bool
    output_excerpt: str
    output_size: int
    output_sha256: str
    output_path: str
    output_cut: int

    @property
    def ok(self) -> bool:
        """The command ran to its end and exited 0."""
        return self.exit_code == 0 and not self.timed_out and not self.stopped

    def describe(self) -> str:
        """One line for people: how the run ended."""
        took = f"after {self.duration_seconds:.1f} s"
        if self.timed_out:
            limit = f"{self.limits.wall_seconds:g} s"
            how = f"killed by {self.signal} at the wall-clock limit of {limit}"
        elif self.stopped:
            how = f"stopped on request ({self.signal})"
        elif self.signal is not None:
            how = f"killed by {self.signal}{_LIMIT_SIGNALS.get(self.signal, '')}"
        else:
            how = f"exit {self.exit_code}"
        return f"{self.runner}: {how} {took}"

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["argv"] = list(self.argv)
        data["env_names"] = list(self.env_names)
        data["limits"] = self.limits.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        values = {name: data[name] for name in cls.__dataclass_fields__}
        values["argv"] = tuple(values["argv"])
        values["env_names"] = tuple(values["env_names"])
        values["limits"] = RunLimits.from_dict(values["limits"])
        return cls(**values)


_LIMIT_SIGNALS = {
    "SIGXCPU": " (the CPU time limit)",
    "SIGXFSZ": " (the file size limit)",
}


class RunnerUnavailable(Exception):
    """The runner cannot run anything here (bubblewrap missing, no user namespaces…). The
    message says what to install or enable. Never a reason to run the command another way."""


class Runner(Protocol):
    """Runs one command to its end and reports it; every run is bounded by its limits.

    ``should_stop`` is asked about twice a second while the command runs; when it answers
    true the run's processes are killed as at the wall-clock limit and the result says
    ``stopped``. A command that cannot start (not found, not executable) is a result with exit
    127 or 126 and the reason in its output, like a shell's; ``RunnerUnavailable`` is raised
    only when the runner itself cannot work, ``ValueError`` for a request it cannot honour (a
    working directory that does not exist)."""

    name: str

    def run(
        self, request: RunRequest, *, should_stop: Callable[[], bool] | None = None
    ) -> RunResult: ...
