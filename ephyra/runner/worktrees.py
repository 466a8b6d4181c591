"""The Git worktrees a quest works in: one per quest revision, checked out from the mirror.

A quest revision's worktree lives at ``<root>/<quest>/r<revision>`` (the caller passes
``<EPHYRA_DATA_DIR>/worktrees`` as the root) on the branch ``ephyra/<quest>/r<revision>`` of
the workspace's bare mirror. ``prepare_worktree`` makes it exist, clean, on that branch;
``remove_quest_worktrees`` takes a quest's worktrees away when the quest ends. Both use the
git command line (``git worktree add/remove/prune``), as a person would.

The branch belongs to Ephyra. When ``prepare_worktree`` finds it already there (a step that
ran before a crash created it), it keeps it when it is the commit asked for or descends from
it: the commits on it are work of an earlier attempt at the same revision (a revert, say), and
the caller sees them (``Worktree.head`` differs from ``Worktree.base``) and reconciles instead
of doing the work twice. A branch that does not descend from the commit is refused
(``WorktreeError``): it is not this revision's work, and nothing is overwritten. The caller may
ask for ``reset=True`` to move the branch back to the commit, discarding its commits, when it
knows they are void. Uncommitted changes in a kept worktree are always discarded: a step that
crashed left them half done. Files git ignores (a virtual environment made by the setup) stay.

A worktree left behind by a crash is cleaned and rebuilt: a directory whose ``.git`` file
points at nothing git knows, a directory that is not a worktree at all, a worktree whose
directory is gone (git lists it as prunable), or one stopped in the middle of a revert, merge,
rebase or bisect.

The mirror's branches under ``refs/heads/ephyra/`` are Ephyra's own: whatever updates the mirror
from its remote must not prune them (a ``git fetch --prune`` with the mirror's ``+refs/*:refs/*``
refspec would delete them, and with them a patch not yet landed).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_QUEST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
_REVISION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/~^-]{0,199}")
# Files git leaves in a worktree's git directory while an operation is stopped halfway.
_IN_PROGRESS = (
    "MERGE_HEAD",
    "REVERT_HEAD",
    "CHERRY_PICK_HEAD",
    "BISECT_START",
    "rebase-merge",
    "rebase-apply",
    "sequencer",
)


class WorktreeError(Exception):
    """The worktree cannot be prepared as asked; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Worktree:
    path: Path
    branch: str
    base: str  # the commit asked for
    head: str  # the branch's commit now: ``base``, or a descendant an earlier attempt made
    rebuilt: bool  # a leftover of a crash was cleaned away first


def branch_name(quest_id: str, revision: int) -> str:
    _check(quest_id, revision)
    return f"ephyra/{quest_id}/r{revision}"


def worktree_path(root: Path, quest_id: str, revision: int) -> Path:
    _check(quest_id, revision)
    return Path(root) / quest_id / f"r{revision}"


def prepare_worktree(
    mirror: Path, root: Path, quest_id: str, revision: int, commit: str, *, reset: bool = False
) -> Worktree:
    """Make the quest revision's worktree exist, clean, on its branch; see the module's
    docstring for what happens to an existing branch or a leftover worktree."""
    mirror = Path(mirror).resolve()
    path = worktree_path(Path(root).resolve(), quest_id, revision)
    branch = branch_name(quest_id, revision)
    base = _commit(mirror, commit)
    _git(mirror, "worktree", "prune")  # forgets worktrees whose directory is gone
    rebuilt = False
    if (path.exists() or path.is_symlink()) and not _healthy(mirror, path, branch):
        _discard(mirror, path)
        rebuilt = True
    tip = _branch_tip(mirror, branch)
    if tip is not None and tip != base and not reset and not _descends(mirror, tip, base):
        raise WorktreeError(
            f"the branch {branch} exists at {tip[:12]}, which does not descend from "
            f"{base[:12]}; it is not this revision's work: delete the branch or start a new "
            "revision"
        )
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        if tip is None:
            _git(mirror, "worktree", "add", "--quiet", "-b", branch, str(path), base)
        else:
            _git(mirror, "worktree", "add", "--quiet", str(path), branch)
    if reset:
        _git(path, "reset", "--quiet", "--hard", base)
    else:
        _git(path, "reset", "--quiet", "--hard", "HEAD")
    _git(path, "clean", "--quiet", "-ffd")  # untracked files go; ignored ones (a venv) stay
    return Worktree(
        path=path, branch=branch, base=base, head=_git(path, "rev-parse", "HEAD"), rebuilt=rebuilt
    )


def remove_worktree(
    mirror: Path, root: Path, quest_id: str, revision: int, *, delete_branch: bool = False
) -> None:
    """Remove the revision's worktree (there or not). Its branch stays unless asked: it holds
    the patch, which must stay reachable until it has landed or been given up."""
    mirror = Path(mirror).resolve()
    path = worktree_path(Path(root).resolve(), quest_id, revision)
    _discard(mirror, path)
    if delete_branch and _branch_tip(mirror, branch_name(quest_id, revision)) is not None:
        _git(mirror, "branch", "--quiet", "-D", branch_name(quest_id, revision))
    _remove_if_empty(path.parent)


def remove_quest_worktrees(
    mirror: Path, root: Path, quest_id: str, *, delete_branches: bool = False
) -> list[Path]:
    """Remove every worktree of a quest (when it ends); returns the paths removed."""
    quest_dir = worktree_path(Path(root).resolve(), quest_id, 1).parent
    removed = []
    if quest_dir.is_dir():
        for entry in sorted(quest_dir.iterdir()):
            match = re.fullmatch(r"r([1-9][0-9]*)", entry.name)
            if match:
                remove_worktree(
                    mirror, root, quest_id, int(match[1]), delete_branch=delete_branches
                )
                removed.append(entry)
    _remove_if_empty(quest_dir)
    return removed


def listed_worktrees(mirror: Path) -> dict[Path, dict[str, str]]:
    """``git worktree list --porcelain`` of the mirror: each worktree's path and attributes
    (``HEAD``, ``branch``, ``prunable``…), the bare mirror itself left out."""
    listing: dict[Path, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in _git(Path(mirror), "worktree", "list", "--porcelain").splitlines():
        key, _, value = line.partition(" ")
        if key == "worktree":
            current = listing.setdefault(Path(value), {})
        elif current is not None and key:
            current[key] = value
    return {path: attrs for path, attrs in listing.items() if "bare" not in attrs}


def _check(quest_id: str, revision: int) -> None:
    if not isinstance(quest_id, str) or not _QUEST.fullmatch(quest_id):
        raise ValueError(
            f"quest id {quest_id!r} must be 1-100 letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
        raise ValueError(f"revision must be a positive integer, not {revision!r}")


def _healthy(mirror: Path, path: Path, branch: str) -> bool:
    """A worktree of this mirror, registered and intact, on ``branch``, with no operation
    stopped halfway."""
    attrs = listed_worktrees(mirror).get(path)
    if attrs is None or "prunable" in attrs or not (path / ".git").is_file():
        return False
    if attrs.get("branch") != f"refs/heads/{branch}":
        return False
    try:
        common = Path(_git(path, "rev-parse", "--path-format=absolute", "--git-common-dir"))
        gitdir = Path(_git(path, "rev-parse", "--path-format=absolute", "--git-dir"))
    except WorktreeError:
        return False
    if common.resolve() != mirror:
        return False
    return not any((gitdir / name).exists() for name in _IN_PROGRESS)


def _discard(mirror: Path, path: Path) -> None:
    """Take the worktree at ``path`` away, whatever state it is in."""
    if path in listed_worktrees(mirror):
        # Twice --force: removes it even when dirty or locked.
        _run_git(mirror, "worktree", "remove", "--force", "--force", str(path))
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    _git(mirror, "worktree", "prune")


def _remove_if_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not empty, or not there
        directory.rmdir()


def _commit(mirror: Path, commit: str) -> str:
    # A commit id or a revision such as a branch name or HEAD~3; never an option.
    if not isinstance(commit, str) or not _REVISION.fullmatch(commit):
        raise WorktreeError(f"{commit!r} is not a commit id or a revision")
    try:
        return _git(mirror, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    except WorktreeError:
        raise WorktreeError(f"the mirror {mirror} has no commit {commit!r}") from None


def _branch_tip(mirror: Path, branch: str) -> str | None:
    done = _run_git(mirror, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")
    return done.stdout.strip() if done.returncode == 0 else None


def _descends(mirror: Path, tip: str, base: str) -> bool:
    return _run_git(mirror, "merge-base", "--is-ancestor", base, tip).returncode == 0


def _git(where: Path, *args: str) -> str:
    done = _run_git(where, *args)
    if done.returncode != 0:
        said = done.stderr.strip() or f"exit {done.returncode}"
        raise WorktreeError(f"git {' '.join(args)} failed in {where}: {said}")
    return done.stdout.strip()


def _run_git(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(where), *args],
        capture_output=True,
        text=True,
        env=_git_env(),
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _git_env() -> dict[str, str]:
    # The worker's environment without git's own variables (a GIT_DIR or GIT_WORK_TREE set by
    # a hook would point every command elsewhere), in the C locale so messages read the same.
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(LC_ALL="C", GIT_TERMINAL_PROMPT="0")
    return env
