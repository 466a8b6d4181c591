"""Rebasing a quest's patch branch onto a base that moved.

The patch's commits (those of the patch head that the new base does not have) are replayed in
memory onto the new base, then the branch is moved to the result with a compare-and-swap on
its old value. A conflict changes nothing: the branch and its worktree stay as they were, so
there is nothing to abort. The worktree that has the branch checked out, when there is one, is
brought to the new head afterwards (``git reset --hard``; files git ignores, such as a virtual
environment, stay).
"""

from __future__ import annotations

from pathlib import Path

import pygit2

from ephyra.landing import commits
from ephyra.landing.remote import git, git_in
from ephyra.landing.results import Conflict, Rebased


class RebaseError(Exception):
    """The branch cannot be rebased as asked (it does not exist and no head was given, or it
    moved while the rebase ran); nothing was changed."""


def rebase(
    mirror: str | Path,
    branch: str,
    *,
    onto: str,
    head: str | None = None,
    worktree: str | Path | None = None,
    committer: tuple[str, str] = commits.COMMITTER,
) -> Rebased | Conflict:
    """Replay the patch on ``branch`` (of the bare ``mirror``) onto ``onto``.

    ``head`` is the patch head the quest recorded (the branch's tip when not given); the
    branch ends at the replayed head. A branch that already holds a rebase of the patch onto
    ``onto`` (an earlier attempt) is answered as it is, without a second replay."""
    mirror = Path(mirror)
    repo = pygit2.Repository(str(mirror))
    ref = f"refs/heads/{branch}"
    if git(mirror, "check-ref-format", ref).returncode != 0:
        raise ValueError(f"{branch!r} is not a branch name")
    tip = repo.references[ref].target if ref in repo.references else None
    source = pygit2.Oid(hex=head) if head is not None else tip
    if source is None:
        raise RebaseError(f"there is no branch {branch} and no patch head to rebase")
    base = pygit2.Oid(hex=onto)
    for oid in (source, base):
        if oid not in repo:
            raise RebaseError(f"the mirror has no commit {oid}")
    if tip is not None and tip != source and tip != base and commits.descends(repo, tip, base):
        return Rebased(str(tip), onto)  # done already, by an attempt that ran before a crash
    patch = commits.patch_commits(repo, source, base)
    made = commits.replay(repo, patch, base, commits.signature(committer))
    if isinstance(made, Conflict):
        return made
    old = str(tip) if tip is not None else "0" * 40
    moved = git(mirror, "update-ref", ref, str(made), old)
    if moved.returncode != 0:
        raise RebaseError(f"{branch} moved while it was rebased: {moved.stderr.strip()}")
    if worktree is not None and Path(worktree).is_dir():
        _follow(Path(worktree), ref)
    return Rebased(str(made), onto)


def _follow(worktree: Path, ref: str) -> None:
    """Bring a worktree that has ``ref`` checked out to its new commit."""
    checked_out = git_in(worktree, "symbolic-ref", "--quiet", "HEAD")
    if checked_out.returncode != 0 or checked_out.stdout.strip() != ref:
        return
    git_in(worktree, "reset", "--quiet", "--hard", "HEAD")
