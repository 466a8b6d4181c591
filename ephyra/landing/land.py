"""Landing an approved patch on the remote's base branch, and checking whether it landed.

``land`` makes the commit to land in the mirror (the patch head itself for a fast-forward; a
merge commit, or the patch replayed onto the base, for the other styles), keeps it under a
private ref named by the caller (``prepared_ref``, from the ledger key) before anything is
sent, then pushes it with a compare-and-swap on the base's expected commit. The ref is what
makes a second attempt and a check exact: an attempt under the same key pushes the very commit
the first one prepared, and ``landed_on`` asks the remote about that commit.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pygit2

from ephyra.landing import commits
from ephyra.landing.remote import (
    DEFAULT_TIMEOUT,
    PRIVATE,
    fetch_base,
    git,
    push_with_lease,
    update_mirror_base,
)
from ephyra.landing.results import BaseMoved, Conflict, Landed, NoAnswer, Refused

_SHA = re.compile(r"[0-9a-f]{40}")
STYLES = ("fast-forward", "merge", "rebase")


def prepared_ref(key: str) -> str:
    """The private ref under which the commit an operation sends is kept, from its ledger key
    (a key holds ':', which a ref name may not)."""
    return f"{PRIVATE}sent/{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def check_branch(mirror: Path, base_branch: str) -> None:
    done = git(mirror, "check-ref-format", f"refs/heads/{base_branch}")
    if done.returncode != 0 or base_branch.startswith("-"):
        raise ValueError(f"{base_branch!r} is not a branch name")


def land(
    mirror: str | Path,
    remote: str,
    *,
    base_branch: str,
    expected_base: str,
    head: str,
    styles: Sequence[str] = ("fast-forward",),
    trailers: Mapping[str, str],
    source: str | None = None,
    prepared_ref: str | None = None,
    credentials: Path | None = None,
    before_send: Callable[[], None] = lambda: None,
    committer: tuple[str, str] = commits.COMMITTER,
    timeout: float = DEFAULT_TIMEOUT,
) -> Landed | BaseMoved | Refused:
    """Write ``head`` to the remote's ``base_branch``, which must still be ``expected_base``.

    ``styles`` are tried in order (the policy's style, then its ``allow``): ``fast-forward``
    when ``head`` descends from ``expected_base``; ``merge``; ``rebase``. ``trailers`` go into
    the message of a merge commit or of the last replayed commit; a fast-forward lands the
    reviewed commits unchanged. ``source`` names the patch in a merge commit's subject.
    ``before_send`` is called right before the push (a write adapter asks there whether it
    still holds its claim, and raises if not).

    Returns ``Landed`` (also when an earlier attempt's push is found on the base),
    ``BaseMoved`` (the remote's base is another commit: nothing was written) or ``Refused``.
    Raises ``NoAnswer`` when the remote gave none: ``sent`` says whether the push had started.
    """
    mirror = Path(mirror)
    check_branch(mirror, base_branch)
    unknown = [style for style in styles if style not in STYLES]
    if unknown or not styles:
        raise ValueError(f"landing styles are {', '.join(STYLES)}; got {list(styles)}")
    repo = pygit2.Repository(str(mirror))
    for name, sha in (("base", expected_base), ("head", head)):
        if not _SHA.fullmatch(sha) or pygit2.Oid(hex=sha) not in repo:
            return Refused("missing_commit", f"the mirror has no {name} commit {sha}")
    expected, head_oid = pygit2.Oid(hex=expected_base), pygit2.Oid(hex=head)
    # Read the base first: a base that moved needs no commit made, an earlier attempt's push
    # is found, and a remote that cannot be read is known before anything is sent.
    read = _read_base(mirror, remote, base_branch, credentials, timeout)
    prepared = _reuse(repo, prepared_ref, expected, head_oid) or (head_oid, "fast-forward")
    if isinstance(read, Refused):
        return read
    if commits.descends(repo, read, prepared[0]):
        update_mirror_base(mirror, base_branch, str(read))
        return Landed(str(prepared[0]), prepared[1], already=True)  # an earlier push
    if read != expected:
        return BaseMoved(str(read))
    if prepared[0] == head_oid:
        made = _prepare(repo, styles, expected, head_oid, trailers, source, committer)
        if isinstance(made, Refused):
            return made
        prepared = made
    if prepared_ref is not None:
        repo.references.create(prepared_ref, prepared[0], force=True)
    commit, style = prepared
    # seed: never a force push. The lease below only passes while the base is expected_base;
    # this makes the push that passes it a fast-forward, so nothing on the base is dropped.
    if not commits.descends(repo, commit, expected):
        raise AssertionError(f"{commit} does not descend from {expected}")
    before_send()
    answer = push_with_lease(
        mirror,
        remote,
        base_branch,
        commit=str(commit),
        expected=expected_base,
        credentials=credentials,
        timeout=timeout,
    )
    if answer.accepted:
        update_mirror_base(mirror, base_branch, str(commit))
        return Landed(str(commit), style, already=answer.flag == "=")
    # Rejected: nothing was written by this push. Why? Read the base as it is now.
    read = _read_base(mirror, remote, base_branch, credentials, timeout, answer.summary)
    if isinstance(read, Refused):
        return read
    if commits.descends(repo, read, commit):
        update_mirror_base(mirror, base_branch, str(read))
        return Landed(str(commit), style, already=True)  # an earlier attempt's push
    if read != expected:
        return BaseMoved(str(read))
    return Refused("landing_refused", f"the remote refused the push: {answer.summary}")


def _read_base(
    mirror: Path,
    remote: str,
    base_branch: str,
    credentials: Path | None,
    timeout: float,
    refused: str = "",
) -> pygit2.Oid | Refused:
    """The remote's base as it is now (fetched into the mirror), or why there is none."""
    try:
        tip = fetch_base(mirror, remote, base_branch, credentials=credentials, timeout=timeout)
    except NoAnswer as exc:
        if refused:
            raise NoAnswer(f"the push was refused ({refused}); then {exc}", sent=False) from None
        raise
    if tip is None:
        return Refused("landing_refused", f"the remote has no branch {base_branch}")
    return pygit2.Oid(hex=tip)


def _reuse(
    repo: pygit2.Repository, ref: str | None, expected: pygit2.Oid, head: pygit2.Oid
) -> tuple[pygit2.Oid, str] | None:
    """The commit an earlier attempt under the same key prepared, if it was for this base,
    and the style it was made in."""
    if ref is None or ref not in repo.references:
        return None
    commit = repo.references[ref].peel(pygit2.Commit)
    if not commits.descends(repo, commit.id, expected):
        return None
    if commit.id == head:
        return commit.id, "fast-forward"
    return commit.id, "merge" if len(commit.parent_ids) == 2 else "rebase"


def _prepare(
    repo: pygit2.Repository,
    styles: Sequence[str],
    expected: pygit2.Oid,
    head: pygit2.Oid,
    trailers: Mapping[str, str],
    source: str | None,
    identity: tuple[str, str],
) -> tuple[pygit2.Oid, str] | Refused:
    committer = commits.signature(identity)
    problems: list[str] = []
    refusal = Refused("not_fast_forward", "")
    for style in styles:
        if style == "fast-forward":
            if commits.descends(repo, head, expected):
                return head, style
            problems.append(
                f"fast-forward: the patch {str(head)[:12]} does not descend from the base "
                f"{str(expected)[:12]}"
            )
            continue
        if style == "merge":
            name = source or str(head)[:12]
            message = commits.with_trailers(
                f"Merge {name}\n\n{commits.subject(repo, head)}\n", trailers
            )
            made = commits.merge(repo, expected, head, message, committer)
        else:
            patch = commits.patch_commits(repo, head, expected)
            made = commits.replay(repo, patch, expected, committer, trailers=trailers)
            if made == expected:
                made = Conflict((), "the patch has no change the base does not have already")
        if isinstance(made, Conflict):
            problems.append(f"{style}: {made.detail}")
            refusal = Refused(f"{style}_conflict", "", made.files)
            continue
        return made, style
    if len(styles) == 1 and styles[0] == "fast-forward":
        problems.append("the policy allows no other style (landing.allow)")
    return Refused(refusal.reason, "; ".join(problems), refusal.files)


def landed_on(
    mirror: str | Path,
    remote: str,
    *,
    base_branch: str,
    commit: str,
    credentials: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> bool | None:
    """Does the remote's base branch hold ``commit`` (it, or a commit whose history has it)?
    The base is fetched into the mirror first. None when the remote cannot be read, or the
    mirror does not know the commit; False when the remote has no such branch."""
    mirror = Path(mirror)
    check_branch(mirror, base_branch)
    repo = pygit2.Repository(str(mirror))
    if not _SHA.fullmatch(commit) or pygit2.Oid(hex=commit) not in repo:
        return None
    try:
        tip = fetch_base(mirror, remote, base_branch, credentials=credentials, timeout=timeout)
    except NoAnswer:
        return None
    if tip is None:
        return False
    return commits.descends(repo, pygit2.Oid(hex=tip), pygit2.Oid(hex=commit))
