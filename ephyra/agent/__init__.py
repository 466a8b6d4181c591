"""The steps of the work on a repository: research, reproduction, locating the culprit, the
patch, and the coding agent's contract. A pure adapter package: it takes a ``Runner`` and
a worktree as arguments and never imports Django, an app or ``ephyra.runner``; the ``work``
app's glue calls it (see ``docs/work.md``)."""

from ephyra.agent.inputs import (
    EarlierQuest,
    Frame,
    ReproductionLike,
    SignalFacts,
    Stopped,
    Workdir,
)

__all__ = [
    "EarlierQuest",
    "Frame",
    "ReproductionLike",
    "SignalFacts",
    "Stopped",
    "Workdir",
]
