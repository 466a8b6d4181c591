"""Prepare a checkout: put the worktree on a commit and run the workspace's setup when it must.

A setup (a virtual environment, an install) is slow and most commits do not change what it
depends on, so it runs again only when something it depends on changed since the last setup
that succeeded in this worktree:

- the Git ids of the ``setup_files`` (Git glob pathspecs: ``*`` stays in a directory, ``**/``
  crosses directories) differ between that setup's commit and this one;
- the setup commands, the ``setup_files`` or the runner kind changed in the policy;
- something the last setup made (a file or directory Git does not track, such as ``.venv/``)
  is gone: a ``git clean`` removed it.

That setup is recorded in a small file in the worktree's own Git directory
(``<mirror>/worktrees/<name>/ephyra-setup.json``): outside the checkout, so neither the
project's files nor its diff see it, and it goes with the worktree when the worktree is
removed. A failed setup removes it: the next ``prepare`` runs the setup again.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ephyra.agent.gitcli import GitError, git, git_dir, head_ref, resolve, run_git
from ephyra.agent.inputs import Stopped, Workdir, run_evidence, run_limits, stop_if_asked
from ephyra.core.ports import RunRequest, RunResult
from ephyra.policy.work import WorkPolicy
from ephyra.redaction.redact import redact

MARKER = "ephyra-setup.json"
BRANCH = "ephyra-branch"
_MAX_PRODUCTS = 200


@dataclass(frozen=True)
class PrepareResult:
    """What ``prepare`` did: the commit checked out, and whether the setup ran (``ran``), was
    reused (``reused``: nothing it depends on changed), had nothing to do (``none``: the
    policy has no setup) or failed (``failed``; ``reason`` says which command and how)."""

    commit: str
    setup: Literal["ran", "reused", "none", "failed"]
    reason: str
    runs: tuple[dict[str, Any], ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.setup != "failed"

    def summary(self) -> str:
        at = self.commit[:12]
        if self.setup == "failed":
            return f"The setup failed at {at}: {self.reason}"[:4000]
        if self.setup == "ran":
            return f"Set up {at} ({self.reason})."[:4000]
        if self.setup == "reused":
            return f"Checked out {at}; the setup was reused ({self.reason})."[:4000]
        return f"Checked out {at}; the policy has no setup."

    def to_evidence(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "setup": self.setup,
            "reason": self.reason,
            "runs": list(self.runs),
        }


def prepare(
    workdir: Workdir, work: WorkPolicy, commit: str, *, name: str = "prepare"
) -> PrepareResult:
    """Check ``commit`` out in the worktree and run the setup if its inputs changed.

    When the worktree's branch is at ``commit``, the worktree is put on the branch;
    otherwise the commit is checked out detached and the branch does not move (the
    caller returns to it: see ``locate.on_commits``). Changes to tracked files are discarded
    (a test run may have left some); files Git does not track stay, the setup's among them.
    The setup commands run through the runner, named ``<name>-setup`` (``<name>-setup-<i>``
    when there are several)."""
    stop_if_asked(workdir)
    sha = resolve(workdir.worktree, commit)
    if sha is None:
        raise GitError(f"the repository has no commit {commit!r}")
    checkout(workdir.worktree, sha)
    if not work.setup:
        return PrepareResult(commit=sha, setup="none", reason="the policy has no setup")
    marker_path = git_dir(workdir.worktree) / MARKER
    marker = _read_marker(marker_path)
    key = _setup_key(work, workdir)
    stale = _why_stale(workdir.worktree, work, marker, key, sha)
    if stale is None:
        return PrepareResult(
            commit=sha,
            setup="reused",
            reason=f"the setup files are as at {str(marker['commit'])[:12]}",
        )
    marker_path.unlink(missing_ok=True)  # a crash in the middle must not look like a setup
    before = _untracked(workdir.worktree)
    runs = []
    for index, argv in enumerate(work.setup, 1):
        stop_if_asked(workdir)
        run_name = f"{name}-setup" if len(work.setup) == 1 else f"{name}-setup-{index}"
        result = workdir.runner.run(
            RunRequest(
                argv=tuple(argv),
                cwd=str(workdir.worktree),
                artifacts_dir=str(workdir.artifacts),
                name=run_name,
                env=dict(workdir.env),
                limits=run_limits(work, "setup"),
            ),
            should_stop=workdir.should_stop,
        )
        runs.append(run_evidence(run_name, result))
        if result.stopped:
            raise Stopped(f"asked to stop during {run_name}")
        if not result.ok:
            return PrepareResult(
                commit=sha,
                setup="failed",
                reason=_failure(index, len(work.setup), argv, result),
                runs=tuple(runs),
            )
    kept = [p for p in marker.get("products", []) if _exists(workdir.worktree, p)]
    products = sorted(set(_untracked(workdir.worktree)) - set(before) | set(kept))
    _write_marker(marker_path, {"commit": sha, "key": key, "products": products[:_MAX_PRODUCTS]})
    return PrepareResult(commit=sha, setup="ran", reason=stale, runs=tuple(runs))


def checkout(worktree: Path, sha: str) -> None:
    """Put the worktree at ``sha``: on its branch when the branch is there, else detached.
    The branch is the one the worktree is on, or was on before ``prepare`` detached it (kept
    in its Git directory, ``ephyra-branch``)."""
    where = head_ref(worktree)
    remembered = git_dir(worktree) / BRANCH
    if where.startswith("refs/heads/"):
        remembered.write_text(where)
    else:
        try:
            where = remembered.read_text().strip()
        except OSError:
            where = ""
    if where.startswith("refs/heads/") and resolve(worktree, where) == sha:
        git(worktree, "checkout", "--force", "--quiet", where.removeprefix("refs/heads/"))
    else:
        git(worktree, "checkout", "--force", "--quiet", "--detach", sha)
    forget_bytecode(worktree)


def forget_bytecode(worktree: Path) -> None:
    """Remove the bytecode Python cached in the project's ``__pycache__`` folders after a
    checkout. Python trusts a cached module whose source has the same size and modification
    second, and checkouts a bisect makes within one second can leave exactly that:
    ``request["lines"]`` and ``request["items"]`` are the same size, so one commit's test would
    run the next one's code and the bisect would name the wrong culprit. Files the project
    committed stay (some source trees carry a ``.pyc``; removing it would leave the worktree
    unclean), and virtual environments are left alone."""
    tracked = set(git(worktree, "ls-files", "-z", "--", ":(glob)**/__pycache__/**").split("\0"))
    for root, dirs, files in os.walk(worktree):
        if "pyvenv.cfg" in files:
            dirs.clear()  # a virtual environment: its caches belong to installed packages
            continue
        dirs[:] = [d for d in dirs if d != ".git"]
        if "__pycache__" not in dirs:
            continue
        dirs.remove("__pycache__")
        for folder, _, names in os.walk(Path(root) / "__pycache__"):
            for name in names:
                path = Path(folder) / name
                if path.relative_to(worktree).as_posix() not in tracked:
                    path.unlink(missing_ok=True)


def _setup_key(work: WorkPolicy, workdir: Workdir) -> str:
    """What else the setup depends on besides the files: its commands, its files' patterns
    and the runner kind (a setup made in the sandbox is not one made outside it)."""
    data = {"setup": work.setup, "files": work.setup_files, "runner": workdir.runner.name}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _why_stale(
    worktree: Path, work: WorkPolicy, marker: dict[str, Any], key: str, sha: str
) -> str | None:
    """Why the setup must run at ``sha``; ``None`` when the last one still holds."""
    if not marker:
        return "no setup has run in this worktree"
    if marker.get("key") != key:
        return "the setup commands, the setup files or the runner changed in the policy"
    gone = [p for p in marker.get("products", []) if not _exists(worktree, p)]
    if gone:
        return f"{', '.join(gone[:3])} (made by the last setup) is gone"
    last = resolve(worktree, str(marker.get("commit", "")))
    if last is None:
        return "the commit of the last setup is not in the repository"
    if last == sha:
        return None
    changed = changed_files(worktree, last, sha, work.setup_files)
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        return f"{', '.join(changed[:3])}{more} changed since {last[:12]}"
    return None


def changed_files(worktree: Path, old: str, new: str, patterns: list[str]) -> list[str]:
    """The files matching ``patterns`` (Git glob pathspecs) whose Git ids differ between two
    commits: the comparison of their trees, read from Git's objects without a checkout."""
    if not patterns:
        return []
    specs = [f":(glob){pattern}" for pattern in patterns]
    out = git(worktree, "diff", "--no-renames", "--name-only", old, new, "--", *specs)
    return out.splitlines()


def _untracked(worktree: Path) -> list[str]:
    """Paths Git does not track, ignored or not (directories end with ``/``)."""
    done = run_git(
        worktree, "status", "--porcelain=v1", "-z", "--ignored", "--untracked-files=normal"
    )
    if done.returncode != 0:
        return []
    return [e[3:] for e in done.stdout.split("\0") if e.startswith(("?? ", "!! "))]


def _exists(worktree: Path, relative: str) -> bool:
    path = worktree / relative.rstrip("/")
    return path.is_symlink() or path.exists()


def _read_marker(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_marker(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, sort_keys=True))
    os.replace(partial, path)


def _failure(index: int, count: int, argv: list[str], result: RunResult) -> str:
    which = "the setup command" if count == 1 else f"setup command {index} of {count}"
    tail = [line for line in result.output_excerpt.splitlines() if line.strip()][-3:]
    said = f"; its output ends: {' / '.join(redact(line)[:200] for line in tail)}" if tail else ""
    return f"{which} ({redact(' '.join(argv))[:200]}) ended with {result.describe()}{said}"
