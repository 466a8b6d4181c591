"""The steps of the work on a repository: research, reproduction, locating the culprit, the
patch, and the coding agent's contract. A pure adapter package: it takes a ``Runner`` and
a worktree as arguments and never imports Django, an app or ``ephyra.runner``; the ``work``
app's glue calls it (see ``docs/work.md``)."""

from ephyra.agent.gitcli import Commit, GitError
from ephyra.agent.inputs import (
    EarlierQuest,
    Frame,
    ReproductionLike,
    SignalFacts,
    Stopped,
    Workdir,
    run_evidence,
    run_limits,
)
from ephyra.agent.locate import (
    ExitStatusReproduction,
    KnownGood,
    LocateError,
    Location,
    Tested,
    bisect,
    known_good,
)
from ephyra.agent.patch import Conflict, Patched, RevertError, revert
from ephyra.agent.prepare import PrepareResult, prepare
from ephyra.agent.research import Research, research

__all__ = [
    "Commit",
    "Conflict",
    "EarlierQuest",
    "ExitStatusReproduction",
    "Frame",
    "GitError",
    "KnownGood",
    "LocateError",
    "Location",
    "Patched",
    "PrepareResult",
    "ReproductionLike",
    "Research",
    "RevertError",
    "SignalFacts",
    "Stopped",
    "Tested",
    "Workdir",
    "bisect",
    "known_good",
    "prepare",
    "research",
    "revert",
    "run_evidence",
    "run_limits",
]
