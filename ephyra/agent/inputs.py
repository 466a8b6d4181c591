"""What every step of the work takes: the signal's facts, where it works, and how it runs.

The glue (the ``work`` app) builds these from the quest, its workspace's policy and its
worktree, and passes them to the step functions of this package (``research``, ``reproduce``,
``known_good``, ``bisect``, ``prepare``, ``revert``…). Nothing here touches Django or picks a
runner: the runner comes in the ``Workdir``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from ephyra.core.ports import RunLimits, Runner, RunResult
from ephyra.policy.work import WorkPolicy

MIB = 1024 * 1024


@dataclass(frozen=True)
class Frame:
    """One stack frame of the signal, innermost first (as ingest stored it). ``file`` is the
    path production reported (``/srv/app/shop/cart.py``), not one of the repository."""

    file: str
    line: int | None
    function: str
    module: str | None
    in_app: bool

    def describe(self) -> str:
        """``shop/cart.py:42 in total``: how a person names the frame."""
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where} in {self.function}"


@dataclass(frozen=True)
class SignalFacts:
    """What the quest knows of its error."""

    fingerprint: str
    exception_type: str
    message: str
    frames: tuple[Frame, ...]
    first_seen: datetime | None


@dataclass(frozen=True)
class Workdir:
    """Where a step works: a worktree of the workspace's mirror (on the branch
    ``ephyra/<quest>/r<rev>``), the directory its runs' logs and records go to, the runner
    every command goes through, the environment commands see (already filtered by
    ``WorkPolicy.env``), and the question a step asks between runs (and passes to every
    ``runner.run``): should it stop?"""

    worktree: Path
    artifacts: Path
    runner: Runner
    env: Mapping[str, str]
    should_stop: Callable[[], bool]


@dataclass(frozen=True)
class EarlierQuest:
    """A quest of the same fingerprint, for research: how it ended."""

    quest_id: str
    state: str
    revision: int
    landed_commit: str | None
    park_reason: str | None


class Stopped(Exception):
    """``should_stop`` said so: the step stopped between runs (or its run was stopped)."""


@runtime_checkable
class ReproductionLike(Protocol):
    """A command that shows the failure, run again at other commits (by bisect, by proof).

    ``run`` runs it in ``workdir`` through ``workdir.runner`` (passing ``workdir.should_stop``)
    on whatever the worktree holds now: ``True`` when it passes, ``False`` when it fails the
    same way it did at the head, ``None`` when it could not run or failed another way (the
    commit cannot say). Callers that run it several times in one step give it a ``Workdir``
    whose runner makes each run's artifacts name unique, so a reproduction may reuse its own
    names on every call. ``reproduce``'s ``Reproduction`` is one; ``locate``'s
    ``ExitStatusReproduction`` is the plainest."""

    def run(self, workdir: Workdir) -> bool | None: ...


def stop_if_asked(workdir: Workdir) -> None:
    """Raise ``Stopped`` when the caller asked the step to stop (checked between runs)."""
    if workdir.should_stop():
        raise Stopped("asked to stop")


CommandKind = Literal["setup", "test", "probe", "lint"]


def run_limits(work: WorkPolicy, kind: CommandKind) -> RunLimits:
    """The limits of one command of ``kind`` under the policy: its wall clock, and the memory
    any command may take (as address space). CPU time is bounded by the wall clock per
    process; the other limits keep the runner's defaults."""
    seconds = getattr(work.limits, f"{kind}_seconds")
    return RunLimits(
        wall_seconds=float(seconds),
        cpu_seconds=seconds,
        address_space_bytes=work.limits.memory_mb * MIB,
    )


def run_evidence(name: str, result: RunResult) -> dict[str, Any]:
    """A run as evidence: small, JSON-ready, naming its full output by digest (the output
    itself stays in the run's artifacts)."""
    return {
        "name": name,
        "argv": list(result.argv)[:20],
        "exit": result.exit_code,
        "signal": result.signal,
        "timed_out": result.timed_out,
        "seconds": round(result.duration_seconds, 3),
        "digest": f"sha256:{result.output_sha256}",
    }


__all__ = [
    "CommandKind",
    "EarlierQuest",
    "Frame",
    "ReproductionLike",
    "SignalFacts",
    "Stopped",
    "Workdir",
    "run_evidence",
    "run_limits",
    "stop_if_asked",
]
