"""The commits landing makes, in the mirror, in memory (pygit2): a merge, a replay of a patch
onto another base, a revert. Nothing is checked out: no working tree is touched, and a
conflict leaves the repository as it was (the new objects are unreferenced).

Replayed commits keep their author and message; Ephyra is their committer, as git does for a
rebase or a cherry-pick.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pygit2
from pygit2.enums import SortMode

from ephyra.landing.results import Conflict

COMMITTER = ("Ephyra", "ephyra@localhost")
# A trailer line as git-interpret-trailers(1) reads it: "Token: value".
_TRAILER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*: ")


def signature(identity: tuple[str, str] = COMMITTER) -> pygit2.Signature:
    return pygit2.Signature(*identity)


def descends(repo: pygit2.Repository, commit: pygit2.Oid, ancestor: pygit2.Oid) -> bool:
    """``commit`` is ``ancestor`` or has it in its history."""
    return commit == ancestor or repo.descendant_of(commit, ancestor)


def with_trailers(message: str, trailers: Mapping[str, str]) -> str:
    """``message`` with the trailers appended: to its trailer block when its last paragraph is
    one, else as a new paragraph. A trailer the message already carries is not repeated."""
    body = message.rstrip("\n")
    lines = [f"{token}: {value}" for token, value in trailers.items()]
    missing = [line for line in lines if line not in body.splitlines()]
    if not missing:
        return body + "\n"
    paragraphs = body.split("\n\n")
    last = [line for line in paragraphs[-1].splitlines() if line]
    in_block = len(paragraphs) > 1 and last and all(_TRAILER.match(line) for line in last)
    return body + ("\n" if in_block else "\n\n") + "\n".join(missing) + "\n"


def subject(repo: pygit2.Repository, commit: pygit2.Oid) -> str:
    message: str = repo[commit].message
    return message.strip().splitlines()[0] if message.strip() else str(commit)[:12]


def _conflict(index: pygit2.Index, what: str) -> Conflict | None:
    if index.conflicts is None:
        return None
    files = sorted(
        {entry.path for sides in index.conflicts for entry in sides if entry is not None}
    )
    return Conflict(tuple(files), f"{what} conflicts in {', '.join(files)}")


def merge(
    repo: pygit2.Repository,
    base: pygit2.Oid,
    head: pygit2.Oid,
    message: str,
    committer: pygit2.Signature,
) -> pygit2.Oid | Conflict:
    """A merge commit of ``head`` into ``base`` (parents: base, head), as ``git merge --no-ff``."""
    index = repo.merge_commits(base, head)
    conflict = _conflict(index, "merging the patch")
    if conflict is not None:
        return conflict
    tree = index.write_tree(repo)
    return repo.create_commit(None, committer, committer, message, tree, [base, head])


def patch_commits(
    repo: pygit2.Repository, head: pygit2.Oid, upstream: pygit2.Oid
) -> list[pygit2.Commit]:
    """The commits of ``head`` that ``upstream`` does not have, oldest first."""
    walker = repo.walk(head, SortMode.TOPOLOGICAL | SortMode.REVERSE)
    walker.hide(upstream)
    return list(walker)


def replay(
    repo: pygit2.Repository,
    commits: list[pygit2.Commit],
    onto: pygit2.Oid,
    committer: pygit2.Signature,
    *,
    trailers: Mapping[str, str] | None = None,
) -> pygit2.Oid | Conflict:
    """Each commit applied onto the one before, starting at ``onto``, as ``git rebase`` does:
    a commit whose change ``onto`` already has is dropped. With ``trailers``, the last commit
    carries them. A merge commit in the patch is a conflict: which of its parents is the
    patch is a person's call."""
    tip = onto
    for commit in commits:
        if len(commit.parents) != 1:
            return Conflict((), f"the patch holds the merge commit {commit.id}; replay it by hand")
        index = repo.merge_trees(commit.parents[0].tree, repo[tip].tree, commit.tree)
        conflict = _conflict(index, f"replaying {str(commit.id)[:12]} ({subject(repo, commit.id)})")
        if conflict is not None:
            return conflict
        tree = index.write_tree(repo)
        if tree == repo[tip].tree_id:
            continue  # already upstream
        tip = repo.create_commit(None, commit.author, committer, commit.message, tree, [tip])
    if trailers and tip != onto:
        last = repo[tip]
        message = with_trailers(last.message, trailers)
        if message != last.message:
            tip = repo.create_commit(
                None, last.author, committer, message, last.tree_id, last.parent_ids
            )
    return tip


def revert(
    repo: pygit2.Repository,
    tip: pygit2.Oid,
    *,
    before: pygit2.Oid,
    after: pygit2.Oid,
    message: str,
    committer: pygit2.Signature,
) -> pygit2.Oid | Conflict | None:
    """One commit on ``tip`` that undoes the change from ``before`` to ``after`` (the whole
    patch, whatever number of commits it had), as ``git revert --no-commit before..after``
    then one commit. None when ``tip`` no longer carries any of that change."""
    index = repo.merge_trees(repo[after].tree, repo[tip].tree, repo[before].tree)
    conflict = _conflict(index, "reverting the landed change")
    if conflict is not None:
        return conflict
    tree = index.write_tree(repo)
    if tree == repo[tip].tree_id:
        return None
    return repo.create_commit(None, committer, committer, message, tree, [tip])
