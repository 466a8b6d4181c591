"""Where a new signal goes, before the policy's rules: the routes intake decides.

For each candidate of an export, in this order (``docs/grouping.md``):

1. **muted** — an unexpired mute of its fingerprint: stored and counted on the mute, no event;
2. **duplicate** — an open quest with its fingerprint: ``signal_merged`` onto it;
3. **conflict** — an open quest whose unlanded patch touches a file of its in-app frames:
   ``signal_sensed`` with ``parent``, a parked child that waits for that quest to land;
4. **regression** — a closed quest with its fingerprint: ``regression_reopened`` on it;
5. otherwise a new quest (``signal_sensed``), which the policy's rules then triage.

A ``Router`` reads what the routes need once per export; routing a candidate updates it, so
the second error of a fingerprint in one export merges into what the first one opened.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import pygit2

from ephyra.core.states import TERMINAL, State
from ephyra.telemetry import SignalCandidate
from intake.otlp.models import FingerprintMute, IngestedSignal
from ledger.models import InboundEvent
from quests.models import Quest
from quests.workspaces import workspace_journal

Kind = Literal["muted", "merge", "conflict", "reopen", "new"]
_TERMINAL = [s.value for s in TERMINAL]


@dataclass(frozen=True, slots=True)
class Route:
    kind: Kind
    quest: str | None = None  # the quest merged into, reopened, muting; None for a new one
    parent: str | None = None  # for a conflict: the quest whose patch the child waits for


@dataclass(frozen=True, slots=True)
class _Patch:
    quest: str
    fingerprint: str
    files: frozenset[str]


class Router:
    """The routes of one export's candidates, from one read of the workspace's state: the
    quests of the export's fingerprints in one query, their mutes in another, and the queued
    quests of fingerprints that have no open one (usually one or two more)."""

    def __init__(self, workspace, candidates: list[SignalCandidate], now: datetime) -> None:
        self.workspace = workspace
        self.now = now
        self.fingerprints = fingerprints = {c.fingerprint for c in candidates}
        self.mutes: dict[str, tuple[str, datetime]] = {}  # fingerprint → (quest, until)
        self.open: dict[str, str] = {}  # fingerprint → its oldest open quest
        self.closed: dict[str, str] = {}  # fingerprint → its most recently closed quest
        self._patches: list[_Patch] | None = None  # read only if a candidate gets that far
        if fingerprints:
            self._read(workspace, fingerprints)

    def _read(self, workspace, fingerprints: set[str]) -> None:
        rows = (
            Quest.objects.filter(workspace=workspace, fingerprint__in=fingerprints)
            .order_by("created_at", "pk")
            .values_list("fingerprint", "quest_id", "state", "updated_at", "data__muted_until")
        )
        closed_at: dict[str, datetime] = {}
        for fingerprint, quest, state, updated_at, muted_until in rows:
            if state not in _TERMINAL:
                self.open.setdefault(fingerprint, quest)
            elif state == State.CLOSED.value:
                if fingerprint not in closed_at or updated_at >= closed_at[fingerprint]:
                    closed_at[fingerprint], self.closed[fingerprint] = updated_at, quest
            elif muted_until:
                # Journalled at triage: it holds before the mute_fingerprint effect's row exists.
                self._mute(fingerprint, quest, datetime.fromisoformat(muted_until))
        mutes = FingerprintMute.objects.filter(
            workspace=workspace, fingerprint__in=fingerprints, until__gt=self.now
        ).values_list("fingerprint", "quest_id", "until")
        for fingerprint, quest, until in mutes:
            self._mute(fingerprint, quest, until)
        rest = fingerprints - self.open.keys() - self.mutes.keys()
        if rest:
            self._queued(workspace, rest)
        for fingerprint in self.open:
            self.closed.pop(fingerprint, None)

    def _mute(self, fingerprint: str, quest: str, until: datetime) -> None:
        held = self.mutes.get(fingerprint)
        if until > self.now and (held is None or until > held[1]):
            self.mutes[fingerprint] = (quest, until)

    def _queued(self, workspace, fingerprints: set[str]) -> None:
        """Quests that are open but not projected as such yet: opened by an earlier export
        whose ``signal_sensed`` the worker has not applied, or closed with a
        ``regression_reopened`` still queued. Both are open as soon as the worker gets there."""
        projected = Quest.objects.filter(workspace=workspace, fingerprint__in=fingerprints)
        queued = (
            IngestedSignal.objects.filter(
                workspace=workspace, fingerprint__in=fingerprints, event=IngestedSignal.Event.SENSED
            )
            .exclude(quest_id__in=projected.values("quest_id"))
            .order_by("received_at", "pk")
            .values_list("fingerprint", "quest_id")
        )
        for fingerprint, quest in queued:
            self.open.setdefault(fingerprint, quest)
        closed = {
            quest: fingerprint
            for fingerprint, quest in self.closed.items()
            if fingerprint in fingerprints and fingerprint not in self.open
        }
        if not closed:
            return
        reopening = InboundEvent.objects.filter(
            workspace=workspace,
            quest_id__in=list(closed),
            type="regression_reopened",
            state=InboundEvent.State.PENDING,
        ).values_list("quest_id", flat=True)
        for quest in reopening:
            self.open.setdefault(closed[quest], quest)

    def route(self, candidate: SignalCandidate) -> Route:
        fingerprint = candidate.fingerprint
        if fingerprint in self.mutes:
            return Route("muted", self.mutes[fingerprint][0])
        if fingerprint in self.open:
            return Route("merge", self.open[fingerprint])
        parent = self._conflicting(candidate)
        if parent is not None:
            return Route("conflict", parent=parent)
        if fingerprint in self.closed:
            return Route("reopen", self.closed[fingerprint])
        return Route("new")

    def mute_of(self, quest: str) -> tuple[str, datetime]:
        """The fingerprint and end of the mute that ``quest`` holds."""
        for fingerprint, (muting, until) in self.mutes.items():
            if muting == quest:
                return fingerprint, until
        raise KeyError(quest)

    def unopened(self) -> set[str]:
        """The export's fingerprints that would open or reopen a quest: neither muted nor
        open."""
        return self.fingerprints - self.open.keys() - self.mutes.keys()

    def opened(self, fingerprint: str, quest: str) -> None:
        """``quest`` is now open for ``fingerprint`` (created, a child, or reopened): the rest
        of the export merges into it."""
        self.open[fingerprint] = quest
        self.closed.pop(fingerprint, None)

    def _conflicting(self, candidate: SignalCandidate) -> str | None:
        if not candidate.paths:
            return None
        if self._patches is None:
            self._patches = _unlanded_patches(self.workspace)
        for patch in self._patches:
            if patch.fingerprint != candidate.fingerprint and touches(patch.files, candidate.paths):
                return patch.quest
        return None


def touches(files: frozenset[str], paths: tuple[str, ...]) -> bool:
    """Does a patch that changed ``files`` (repository paths) touch a frame at one of ``paths``
    (normalised frame paths)? Equal paths match; so does one that ends with ``/`` + the other
    when the shorter has a directory, because a deployment root or a monorepo prefix may be
    left on either side (``srv/shop/cart.py`` is ``shop/cart.py``; ``cart.py`` alone is not)."""
    for path in paths:
        if path in files:
            return True
        for file in files:
            shorter, longer = (path, file) if len(path) < len(file) else (file, path)
            if "/" in shorter and longer.endswith("/" + shorter):
                return True
    return False


def _unlanded_patches(workspace) -> list[_Patch]:
    """Open quests with a recorded patch that has not landed, oldest first, with the files
    their patch changed. A landed patch (watching, rolled back) has nothing left to wait for."""
    rows = (
        Quest.objects.filter(workspace=workspace)
        .exclude(state__in=_TERMINAL)
        .order_by("created_at", "pk")
        .values_list(
            "quest_id", "fingerprint", "data__patch_head", "data__base", "data__landed_commit"
        )
    )
    patches = []
    repo = None
    for quest, fingerprint, head, base, landed in rows:
        if not head or landed:
            continue
        if repo is None:
            repo = workspace_journal(workspace).repo
        files = patch_files(repo, base, head)
        if files:
            patches.append(_Patch(quest, fingerprint, files))
    return patches


_cache: dict[tuple[str, str | None, str], frozenset[str]] = {}
_cache_lock = threading.Lock()
CACHE_SIZE = 4096


def patch_files(repo: pygit2.Repository, base: str | None, head: str) -> frozenset[str]:
    """The paths a patch changed: from the merge base of ``base`` and ``head`` to ``head``
    (so a base that moved on since does not count its own changes), or the head's first parent
    when the base is unknown. Empty when the repository does not have the commits. Commits
    never change, so the answer is kept (per repository, base and head)."""
    key = (repo.path, base, head)
    with _cache_lock:
        known = _cache.get(key)
    if known is not None:
        return known
    files = _diff_files(repo, base, head)
    if files is None:
        return frozenset()  # not kept: the commits may be fetched later
    with _cache_lock:
        if len(_cache) >= CACHE_SIZE:
            _cache.clear()
        _cache[key] = files
    return files


def _diff_files(repo: pygit2.Repository, base: str | None, head: str) -> frozenset[str] | None:
    try:
        head_commit = repo.get(head)
        if not isinstance(head_commit, pygit2.Commit):
            return None
        start = None
        if base:
            base_commit = repo.get(base)
            if isinstance(base_commit, pygit2.Commit):
                merge_base = repo.merge_base(base_commit.id, head_commit.id)
                start = repo[merge_base] if merge_base is not None else base_commit
        if start is None:
            if not head_commit.parents:
                return None
            start = head_commit.parents[0]
    except (ValueError, KeyError, pygit2.GitError):
        return None  # not a commit id, or not in this repository
    diff = start.tree.diff_to_tree(head_commit.tree)
    files = set()
    for delta in diff.deltas:
        files.add(delta.old_file.path)
        files.add(delta.new_file.path)
    return frozenset(files)


def signal_facts(workspace, quest_id: str) -> tuple[str, tuple[str, ...]]:
    """The exception type and in-app frame paths of the signal that opened (or first reached)
    a quest, for the policy's ``exception_types`` and ``paths`` rules. Empty for a quest no
    OTLP signal reached."""
    row = (
        IngestedSignal.objects.filter(workspace=workspace, quest_id=quest_id)
        .exclude(event=IngestedSignal.Event.MUTED)
        .order_by("pk")
        .values_list("exception_type", "paths")
        .first()
    )
    if row is None:
        return "", ()
    exception_type, paths = row
    return exception_type, tuple(paths or ())
