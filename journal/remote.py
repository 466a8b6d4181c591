"""Journals travel with the repository: push and fetch ``refs/ephyra/*`` with the git CLI.

The git CLI does the remote side (transports, credentials helpers, hooks) exactly as it does for
branches. The one rule: a journal ref only ever moves forward.

- ``push`` is a plain, non-forced push of ``refs/ephyra/*:refs/ephyra/*`` (no ``+``, no
  ``--force``, no ``--force-with-lease``). git accepts a ref only when the remote's value is an
  ancestor of ours, and the receiving side moves it with the value it advertised as the old
  value, under the ref's lock, so a concurrent update on the remote also fails. A rejected ref is
  reported as ``PushRejected`` with its name and git's reason; it is never overwritten.
  ``--force-with-lease`` was not chosen: it would let a journal be rewritten whenever our view of
  the remote is current, and a journal is never rewritten.
- ``fetch`` copies the remote's journals to ``refs/ephyra-remote/<name>/*`` (forced: those refs
  only mirror the remote, like remote-tracking branches), then moves each local journal ref only
  by fast-forward (CAS), and reports quests that are ahead or diverged instead of moving them.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import NamedTuple

import pygit2

from journal.errors import JournalConflict, JournalError
from journal.format import REF_PREFIX
from journal.store import Journal

JOURNAL_REFS = "refs/ephyra/"
TRACKING_PREFIX = "refs/ephyra-remote/"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class PushRejected(JournalConflict):
    """The remote refused some journal refs: its journals moved in a way ours do not include."""

    def __init__(self, rejected: dict[str, str], accepted: list[str]) -> None:
        self.rejected = rejected  # ref name -> git's reason ("fetch first", "non-fast-forward")
        self.accepted = accepted  # refs that were pushed in the same call (pushes are per ref)
        first = next(iter(rejected))
        quest = first[len(REF_PREFIX) :] if first.startswith(REF_PREFIX) else first
        refs = ", ".join(f"{ref} ({why})" for ref, why in rejected.items())
        super().__init__(quest, None, None, f"the remote refused {refs}")
        self.args = (f"push rejected: {refs}",)

    @property
    def refs(self) -> list[str]:
        return list(self.rejected)


class PushResult(NamedTuple):
    created: list[str]  # ref names new on the remote
    updated: list[str]  # fast-forwarded on the remote
    unchanged: list[str]


class FetchResult(NamedTuple):
    """Quest ids by what happened to the local journal ref."""

    created: list[str]  # new here, created from the remote's journal
    fast_forwarded: list[str]  # the remote had more; the local ref moved forward
    unchanged: list[str]
    ahead: list[str]  # we have more than the remote: push
    diverged: list[str]  # both have commits the other lacks: left alone, needs reconciling
    behind: list[str]  # the remote has more, but fast_forward=False


def _git(
    journal: Journal, *args: str, timeout: float, options: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}  # no prompts; parseable
    # ``options``: git's own ``-c`` options first (the credential helper of a credentials file).
    return subprocess.run(
        ["git", *(options or []), "--git-dir", journal.path, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def push(
    journal: Journal,
    remote: str | os.PathLike[str],
    *,
    quests: list[str] | None = None,
    refs: list[str] | None = None,
    options: list[str] | None = None,
    timeout: float = 300.0,
) -> PushResult:
    """Push the journals (all of ``refs/ephyra/*``, only ``quests``, or only the full ref names
    ``refs``, each under ``refs/ephyra/``) to ``remote``: a URL, a path, or a configured remote
    name. Raises ``PushRejected`` naming every refused ref."""
    if refs is not None:
        if any(not ref.startswith(JOURNAL_REFS) or ref.startswith("-") for ref in refs):
            raise ValueError("only refs under refs/ephyra/ are pushed")
        refspecs = [f"{ref}:{ref}" for ref in refs]
        if not refspecs:
            return PushResult([], [], [])
    elif quests is None:
        if not any(name.startswith(JOURNAL_REFS) for name in journal.repo.references):
            return PushResult([], [], [])  # git fails on a glob that matches nothing
        refspecs = [f"{JOURNAL_REFS}*:{JOURNAL_REFS}*"]
    else:
        refspecs = [f"{REF_PREFIX}{q}:{REF_PREFIX}{q}" for q in quests]
        if not refspecs:
            return PushResult([], [], [])
    done = _git(
        journal, "push", "--porcelain", os.fspath(remote), *refspecs, timeout=timeout,
        options=options,
    )  # fmt: skip
    created: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    rejected: dict[str, str] = {}
    # --porcelain: one "<flag>\t<src>:<dst>\t<summary>" line per ref; flags documented in
    # git-push(1): ' ' fast-forward, '*' new, '=' up to date, '!' rejected, '+' forced.
    for line in done.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or len(parts[0]) != 1 or ":" not in parts[1]:
            continue
        flag, dst, summary = parts[0], parts[1].split(":", 1)[1], parts[2]
        if flag == "!":
            rejected[dst] = summary.strip("[]() ").replace("] (", ": ") or "rejected"
        elif flag == "*":
            created.append(dst)
        elif flag == " ":
            updated.append(dst)
        elif flag == "=":
            unchanged.append(dst)
        else:  # '+' or '-' cannot come from a non-forced push of these refspecs
            raise JournalError(f"unexpected push result for {dst}: {line!r}")
    if rejected:
        raise PushRejected(rejected, created + updated)
    if done.returncode != 0:
        raise JournalError(f"git push to {remote} failed: {done.stderr.strip()}")
    return PushResult(created, updated, unchanged)


def fetch(
    journal: Journal,
    remote: str | os.PathLike[str],
    *,
    name: str = "origin",
    fast_forward: bool = True,
    options: list[str] | None = None,
    timeout: float = 300.0,
) -> FetchResult:
    """Fetch the remote's journals to ``refs/ephyra-remote/<name>/`` and compare each quest.

    With ``fast_forward`` a local journal that is strictly behind moves forward (by CAS; a
    local write racing it wins, and the quest is classified against that write instead).
    """
    if not _NAME.match(name):
        raise ValueError(f"remote name {name!r}: letters, digits, '.', '_' and '-' only")
    tracking = f"{TRACKING_PREFIX}{name}/"
    spec = f"+{JOURNAL_REFS}*:{tracking}*"
    done = _git(
        journal, "fetch", "--no-tags", "--prune", os.fspath(remote), spec, timeout=timeout,
        options=options,
    )  # fmt: skip
    if done.returncode != 0:
        raise JournalError(f"git fetch from {remote} failed: {done.stderr.strip()}")
    repo = journal.repo
    result = FetchResult([], [], [], [], [], [])
    prefix = tracking + REF_PREFIX[len(JOURNAL_REFS) :]
    for ref_name in sorted(n for n in repo.references if n.startswith(prefix)):
        quest_id = ref_name[len(prefix) :]
        theirs = repo.references[ref_name].target
        ours = journal.head(quest_id)
        _compare(journal, quest_id, ours, theirs, fast_forward, result)
    return result


def _compare(
    journal: Journal,
    quest_id: str,
    ours: pygit2.Oid | None,
    theirs: pygit2.Oid,
    fast_forward: bool,
    result: FetchResult,
) -> None:
    repo = journal.repo
    if ours == theirs:
        result.unchanged.append(quest_id)
    elif ours is not None and repo.descendant_of(ours, theirs):
        result.ahead.append(quest_id)
    elif ours is None or repo.descendant_of(theirs, ours):
        if not fast_forward:
            result.behind.append(quest_id)
            return
        try:
            journal.fast_forward(quest_id, ours, theirs)
        except JournalConflict:  # a local write won the race: classify against it instead
            _compare(journal, quest_id, journal.head(quest_id), theirs, False, result)
            return
        (result.created if ours is None else result.fast_forwarded).append(quest_id)
    else:
        result.diverged.append(quest_id)
