"""The patch: revert the culprit on the quest revision's branch.

``revert`` runs ``git revert --no-edit`` (``-m 1`` for a merge: its changes are undone against
its first parent, the line the bisect followed) in the worktree, on its branch
``ephyra/<quest>/r<rev>``. A clean revert is a commit on that branch: ``Patched``. A conflict is
aborted, leaving the branch as it was, and reported with its files: ``Conflict``; so is a
revert that would change nothing (the head already undid the culprit's change).

It is idempotent: when the branch already carries Ephyra's revert of that culprit (a step
that ran before a crash made it), the same ``Patched`` comes back and no second revert is
made. Ephyra's revert is recognised by its message (``This reverts commit <sha>``, which git
writes) and its committer, Ephyra's identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ephyra.agent.gitcli import (
    IDENTITY,
    GitError,
    commit,
    git,
    git_dir,
    head_ref,
    is_ancestor,
    resolve,
    run_git,
)
from ephyra.agent.inputs import Workdir, stop_if_asked


class RevertError(ValueError):
    """The revert cannot be attempted as asked; the message says why."""


@dataclass(frozen=True)
class Patched:
    """The patch: ``head`` (the revert commit) on ``branch``, made on ``base``."""

    head: str
    base: str
    culprit: str
    branch: str
    files: tuple[str, ...]
    again: bool  # the branch already carried it: no new commit was made

    def summary(self) -> str:
        made = "was already on" if self.again else "is on"
        return (
            f"The revert of {self.culprit[:12]} {made} {self.branch}: {self.head[:12]} "
            f"(on {self.base[:12]}), changing {', '.join(self.files[:5]) or 'nothing'}"
            f"{' and more' if len(self.files) > 5 else ''}."
        )

    def to_evidence(self) -> dict[str, Any]:
        return {
            "head": self.head,
            "base": self.base,
            "culprit": self.culprit,
            "branch": self.branch,
            "files": list(self.files[:100]),
            "again": self.again,
        }


@dataclass(frozen=True)
class Conflict:
    """The revert did not apply: ``conflict`` (``files`` are those in conflict) or ``empty``
    (it would change nothing). The branch is as it was before."""

    culprit: str
    reason: Literal["conflict", "empty"]
    files: tuple[str, ...]
    detail: str

    def summary(self) -> str:
        if self.reason == "empty":
            return f"Reverting {self.culprit[:12]} changes nothing: {self.detail}"[:4000]
        return (
            f"Reverting {self.culprit[:12]} conflicts in {len(self.files)} file(s): "
            f"{', '.join(self.files[:20])}. The revert was aborted; the branch is unchanged."
        )[:4000]

    def to_evidence(self) -> dict[str, Any]:
        return {
            "culprit": self.culprit,
            "reason": self.reason,
            "files": list(self.files[:100]),
            "detail": self.detail[:1000],
        }


def revert(
    workdir: Workdir, culprit: str, *, mainline: int | None, identity: tuple[str, str] = IDENTITY
) -> Patched | Conflict:
    """Revert ``culprit`` on the worktree's branch (see the module's docstring). Changes to
    tracked files left in the worktree (by a test run) are discarded first; a revert left
    half done by a crash is aborted. ``identity`` is the author and committer of the revert."""
    stop_if_asked(workdir)
    tree = workdir.worktree
    sha = resolve(tree, culprit)
    if sha is None:
        raise RevertError(f"the repository has no commit {culprit!r}")
    where = head_ref(tree)
    if not where.startswith("refs/heads/"):
        raise RevertError(
            f"the worktree is not on its branch (detached at {where[:12]}): prepare it first"
        )
    branch = where.removeprefix("refs/heads/")
    target = commit(tree, sha)
    if target.is_merge and mainline is None:
        raise RevertError(f"{sha[:12]} is a merge: revert it with mainline=1 (its first parent)")
    if not target.is_merge and mainline is not None:
        raise RevertError(f"{sha[:12]} is not a merge: revert it without a mainline")
    if mainline is not None and not 1 <= mainline <= len(target.parents):
        raise RevertError(f"{sha[:12]} has {len(target.parents)} parents, not {mainline}")
    _abort_leftovers(tree)
    head = git(tree, "rev-parse", "HEAD")
    if not is_ancestor(tree, sha, head):
        raise RevertError(f"{sha[:12]} is not in the history of {branch}: nothing to revert")
    earlier = _earlier_revert(tree, sha, head, identity)
    if earlier is not None:
        base = git(tree, "rev-parse", f"{earlier}^")
        return Patched(earlier, base, sha, branch, _files(tree, base, earlier), True)
    _no_silent_merges(tree)
    args = ["revert", "--no-edit"]
    if mainline is not None:
        args += ["-m", str(mainline)]
    done = run_git(tree, *args, sha, identity=identity)
    if done.returncode == 0:
        new = git(tree, "rev-parse", "HEAD")
        return Patched(new, head, sha, branch, _files(tree, head, new), False)
    conflicted = git(tree, "diff", "--name-only", "--diff-filter=U").splitlines()
    said = (done.stdout + done.stderr).strip()
    _abort_leftovers(tree)
    if git(tree, "rev-parse", "HEAD") != head:  # never leave half a patch behind
        git(tree, "reset", "--hard", "--quiet", head)
    if conflicted:
        return Conflict(sha, "conflict", tuple(conflicted), said[-1000:])
    if "nothing to commit" in said:
        return Conflict(sha, "empty", (), "the head already undoes the culprit's change")
    raise GitError(f"git revert {sha[:12]} failed in {tree}: {said[-1000:]}")


# Overrides the project's own .gitattributes (info/attributes is read last and wins): a
# `merge=union` rule would keep both sides of a conflicting line and call the revert clean.
NO_SILENT_MERGES = "* merge\n"


def _no_silent_merges(tree: Path) -> None:
    common = Path(git(tree, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    attributes = common / "info" / "attributes"
    text = attributes.read_text() if attributes.exists() else ""
    if NO_SILENT_MERGES not in text.splitlines(keepends=True):
        attributes.parent.mkdir(parents=True, exist_ok=True)
        attributes.write_text(
            text + ("" if not text or text.endswith("\n") else "\n") + NO_SILENT_MERGES
        )


def _abort_leftovers(tree: Path) -> None:
    """Abort a revert (or cherry-pick) stopped halfway and discard changes to tracked files."""
    gitdir = git_dir(tree)
    if (gitdir / "REVERT_HEAD").exists() or (gitdir / "sequencer").exists():
        run_git(tree, "revert", "--abort")
    if (gitdir / "CHERRY_PICK_HEAD").exists():
        run_git(tree, "cherry-pick", "--abort")
    git(tree, "reset", "--hard", "--quiet", "HEAD")


def _earlier_revert(tree: Path, sha: str, head: str, identity: tuple[str, str]) -> str | None:
    """Ephyra's revert of ``sha`` already on the branch (the newest), if any."""
    out = git(
        tree,
        "rev-list",
        "--first-parent",
        "--fixed-strings",
        f"--grep=This reverts commit {sha}",
        f"--committer=<{identity[1]}>",
        head,
        f"^{sha}",
    )
    found = out.split()
    return found[0] if found else None


def _files(tree: Path, old: str, new: str) -> tuple[str, ...]:
    return tuple(git(tree, "diff", "--no-renames", "--name-only", old, new).splitlines())
