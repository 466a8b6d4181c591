"""Rolling back a landed patch: one revert commit on the remote's base, pushed with the same
compare-and-swap as a landing.

The revert undoes the whole patch (the change from the base it landed on to the landed commit,
however many commits it had, or a merge commit's change against its first parent), on top of
the base as it is now, and carries Ephyra's trailers. Like ``land``, it keeps the revert under
the caller's private ref before sending, so a second attempt under the same key pushes the same
commit and a check asks about it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pygit2

from ephyra.landing import commits
from ephyra.landing.land import check_branch
from ephyra.landing.remote import DEFAULT_TIMEOUT, fetch_base, push_with_lease, update_mirror_base
from ephyra.landing.results import BaseMoved, Conflict, NoAnswer, Refused, RolledBack

# How far back along the base a person's revert of the landed commit is looked for.
_LOOK_BACK = 1000


def rollback(
    mirror: str | Path,
    remote: str,
    *,
    base_branch: str,
    landed_commit: str,
    patch_base: str | None = None,
    trailers: Mapping[str, str],
    prepared_ref: str | None = None,
    credentials: Path | None = None,
    before_send: Callable[[], None] = lambda: None,
    committer: tuple[str, str] = commits.COMMITTER,
    timeout: float = DEFAULT_TIMEOUT,
) -> RolledBack | BaseMoved | Conflict | Refused:
    """Revert ``landed_commit`` (the patch from ``patch_base``, by default the landed commit's
    first parent) on the remote's ``base_branch``.

    The base is read first; the revert is made on it and pushed only while the base is still
    that commit. Returns ``RolledBack`` (also when the revert is found on the base from an
    earlier attempt, or when the base no longer carries the change: someone reverted it),
    ``BaseMoved`` when the base moved between the read and the push (nothing was written; ask
    again), ``Conflict`` when the revert conflicts with what landed since, ``Refused`` when the
    remote refused the push. Raises ``NoAnswer`` when the remote gave none."""
    mirror = Path(mirror)
    check_branch(mirror, base_branch)
    repo = pygit2.Repository(str(mirror))
    landed = pygit2.Oid(hex=landed_commit)
    if landed not in repo:
        return Refused("missing_commit", f"the mirror has no landed commit {landed_commit}")
    before = repo[landed].parent_ids[0]
    given = pygit2.Oid(hex=patch_base) if patch_base else None
    if given is not None and given in repo and commits.descends(repo, landed, given):
        before = given
    tip_hex = fetch_base(mirror, remote, base_branch, credentials=credentials, timeout=timeout)
    if tip_hex is None:
        return Refused("rollback_refused", f"the remote has no branch {base_branch}")
    tip = pygit2.Oid(hex=tip_hex)
    if prepared_ref is not None and prepared_ref in repo.references:
        sent = repo.references[prepared_ref].target
        if commits.descends(repo, tip, sent):
            return RolledBack(str(sent), already=True)  # an earlier attempt's push landed
    if not commits.descends(repo, tip, landed):
        return RolledBack(None, already=True)  # the base does not carry it (any more)
    message = commits.with_trailers(
        f'Revert "{commits.subject(repo, landed)}"\n\nThis reverts commit {landed_commit}.\n',
        trailers,
    )
    made = commits.revert(
        repo, tip, before=before, after=landed, message=message,
        committer=commits.signature(committer),
    )  # fmt: skip
    if isinstance(made, Conflict):
        return made
    if made is None:
        return RolledBack(_revert_of(repo, tip, landed), already=True)
    if prepared_ref is not None:
        repo.references.create(prepared_ref, made, force=True)
    before_send()
    answer = push_with_lease(
        mirror,
        remote,
        base_branch,
        commit=str(made),
        expected=tip_hex,
        credentials=credentials,
        timeout=timeout,
    )
    if answer.accepted:
        update_mirror_base(mirror, base_branch, str(made))
        return RolledBack(str(made), already=answer.flag == "=")
    try:
        now = fetch_base(mirror, remote, base_branch, credentials=credentials, timeout=timeout)
    except NoAnswer as exc:
        raise NoAnswer(f"the push was refused ({answer.summary}); then {exc}", sent=False) from None
    if now is not None and commits.descends(repo, pygit2.Oid(hex=now), made):
        return RolledBack(str(made), already=True)
    if now is not None and now != tip_hex:
        return BaseMoved(now)
    return Refused("rollback_refused", f"the remote refused the push: {answer.summary}")


def _revert_of(repo: pygit2.Repository, tip: pygit2.Oid, landed: pygit2.Oid) -> str | None:
    """The commit on the base since ``landed`` whose message says it reverts it, as
    ``git revert`` writes (``This reverts commit <id>.``), if there is one."""
    needle = f"This reverts commit {landed}"
    oid: pygit2.Oid | None = tip
    for _ in range(_LOOK_BACK):
        if oid is None or oid == landed:
            return None
        commit = repo[oid]
        if needle in commit.message:
            return str(oid)
        oid = commit.parent_ids[0] if commit.parent_ids else None
    return None
