"""Where code runs: the runners behind ``ephyra.core.ports.Runner``, and the Git worktrees.

Every command a step runs (a workspace's setup and tests, a probe, each bisect step, a coding
agent) goes through one runner:

- ``LocalRunner`` runs it as a subprocess of the worker, in its own session and process group,
  stdin closed, with an environment made of the request's allowlist only, a wall-clock limit
  that kills the whole group, ``setrlimit`` limits, and its output captured to a capped file;
- ``SandboxRunner`` runs the same inside bubblewrap: no network, a read-only minimal root, a
  private ``/tmp``, only the worktree writable. It refuses to run where bubblewrap cannot.

Each run leaves ``<name>.log`` (its output, capped) and ``<name>.json`` (its record,
``RunResult.to_dict()``) in the request's artifacts directory (``artifacts``).
``worktrees`` prepares and removes the worktree of a quest revision. Pure of Django: the
standard library and ``ephyra.core`` only. ``docs/work.md`` describes it for operators.
"""

from ephyra.core.ports import RunLimits, Runner, RunnerUnavailable, RunRequest, RunResult
from ephyra.runner.artifacts import read_record
from ephyra.runner.local import DEFAULT_PATH, LocalRunner
from ephyra.runner.sandbox import SandboxRunner
from ephyra.runner.worktrees import (
    Worktree,
    WorktreeError,
    branch_name,
    prepare_worktree,
    remove_quest_worktrees,
    remove_worktree,
    worktree_path,
)

__all__ = [
    "DEFAULT_PATH",
    "LocalRunner",
    "RunLimits",
    "RunRequest",
    "RunResult",
    "Runner",
    "RunnerUnavailable",
    "SandboxRunner",
    "Worktree",
    "WorktreeError",
    "branch_name",
    "prepare_worktree",
    "read_record",
    "remove_quest_worktrees",
    "remove_worktree",
    "worktree_path",
]
