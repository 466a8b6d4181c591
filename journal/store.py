"""The Git journal: one ref per quest, one commit per accepted transition, written by CAS.

A quest lives at ``refs/ephyra/quests/<id>``. Each commit's tree holds the quest after the event
(``quest.json``), the event, the effects it asked for, the decision, and the quest's files, so a
person can read everything with plain ``git`` (``docs/journal.md``). Git is the truth: the
database projection is rebuilt from here, and the pending effects are in the commit so nothing
is lost between the Git write and the database write.

Moving a ref is a compare-and-swap, never a forced update:
- an existing ref moves with ``Reference.set_target``, which libgit2 checks under the ref's lock
  against the value the ``Reference`` was read with ("old reference value does not match");
- a new ref is created inside ``repo.transaction()``: lock it, read it under the lock, set it
  only if still absent. ``references.create(force=False)`` checks existence *before* it takes
  the lock, so two creators could both pass the check; the transaction cannot.
Either way a lost race raises ``JournalConflict``; ``journal.apply`` reloads and decides again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pygit2

from ephyra.core.events import BaseEvent, event_to_dict, parse_event
from ephyra.core.machine import Decision
from ephyra.core.quest import Quest
from journal.errors import JournalConflict, JournalError
from journal.format import (
    BLOB,
    DECISION,
    DECISIONS_DIR,
    EFFECTS,
    EVENT,
    EVENT_TRAILER,
    HYPOTHESIS,
    PLAN,
    PROOF_DIR,
    PROOF_FILE,
    QUEST,
    REF_PREFIX,
    SIGNAL,
    TREE,
    Entry,
    commit_message,
    hex_or_none,
    pretty_json,
    signature,
    text_file,
)

_CACHE_LIMIT = 20_000  # entries per cache; past it a cache starts over (it only saves reads)


def _conflict_text(exc: Exception) -> str | None:
    """Why libgit2 refused a ref update, when the refusal means "someone else wrote"."""
    if isinstance(exc, KeyError):  # pygit2.NotFoundError: the ref was deleted under us
        return "the ref was deleted"
    text = str(exc)
    if "does not match" in text:
        return "the ref moved"
    if "failed to lock" in text or "failed to create locked file" in text:
        # another writer holds <ref>.lock right now (libgit2 words it both ways)
        return "the ref is locked by another writer"
    return None


class Journal:
    """The quest journals of one repository (bare or not). One instance per thread."""

    def __init__(self, path: str | os.PathLike[str] | pygit2.Repository) -> None:
        self.repo = path if isinstance(path, pygit2.Repository) else pygit2.Repository(str(path))
        # Reference objects this instance last moved, by ref name. set_target on one of them is
        # a CAS against the value it holds, so a stale cached object can only fail, never clobber.
        self._refs: dict[str, pygit2.Reference] = {}
        # Tree oid of commits this instance wrote or read: the next append builds on the parent
        # tree without reading the parent commit back from disk (a loose read per transition).
        self._trees: dict[pygit2.Oid, pygit2.Oid] = {}

    @classmethod
    def init(cls, path: str | os.PathLike[str], *, bare: bool = True) -> Journal:
        return cls(pygit2.init_repository(str(path), bare=bare))

    @property
    def path(self) -> str:
        """The git directory (``.git`` of a working copy, or the bare repository)."""
        return self.repo.path

    @staticmethod
    def ref_name(quest_id: str) -> str:
        return REF_PREFIX + quest_id

    # --- reading -----------------------------------------------------------------------------

    def head(self, quest_id: str) -> pygit2.Oid | None:
        ref = self.repo.references.get(REF_PREFIX + quest_id)
        return None if ref is None else ref.target

    def load(self, quest_id: str) -> tuple[Quest | None, pygit2.Oid | None]:
        """The quest at its head and the head's oid, or ``(None, None)`` for an unknown quest."""
        head = self.head(quest_id)
        if head is None:
            return None, None
        return self.quest_at(head), head

    def quest_at(self, oid: pygit2.Oid) -> Quest:
        tree = self.repo[oid].tree
        self._remember(oid, tree.id)
        return Quest.from_dict(self._json(tree, QUEST))

    def event_id(self, oid: pygit2.Oid) -> str | None:
        """The id of the event a journal commit records (its ``Ephyra-Event`` trailer)."""
        message = self.repo[oid].message
        start = message.rfind(EVENT_TRAILER)
        if start < 0:
            return None
        start += len(EVENT_TRAILER)
        end = message.find("\n", start)
        return message[start:] if end < 0 else message[start:end]

    def entry(self, oid: pygit2.Oid) -> Entry:
        tree = self.repo[oid].tree
        return Entry(
            oid,
            parse_event(self._blob(tree, EVENT)),
            self._json(tree, DECISION),
            Quest.from_dict(self._json(tree, QUEST)),
            self._json(tree, EFFECTS),
        )

    def history(self, quest_id: str) -> list[Entry]:
        """Every transition of the quest, oldest first."""
        head = self.head(quest_id)
        if head is None:
            return []
        entries = [self.entry(oid) for oid in self.commits(head)]
        entries.reverse()
        return entries

    def commits(self, head: pygit2.Oid) -> Iterator[pygit2.Oid]:
        """The journal's commits from ``head`` back to the creation, newest first.

        A journal is linear by construction (CAS appends, fast-forward-only pushes); a merge
        commit means someone wrote here by hand, and guessing which parent is the truth would
        be worse than stopping.
        """
        oid: pygit2.Oid | None = head
        while oid is not None:
            commit = self.repo[oid]
            parents = commit.parent_ids
            if len(parents) > 1:
                raise JournalError(f"{oid} has {len(parents)} parents: a journal is linear")
            yield oid
            oid = parents[0] if parents else None

    def quest_ids(self) -> list[str]:
        n = len(REF_PREFIX)
        return sorted(name[n:] for name in self.repo.references if name.startswith(REF_PREFIX))

    def read(self, quest_id: str, path: str, at: pygit2.Oid | None = None) -> bytes | None:
        """A file of the quest's tree (``plan.md``, ``proof/bundle.json``…) at ``at`` or the
        head; None when the quest or the file does not exist."""
        oid = at if at is not None else self.head(quest_id)
        if oid is None:
            return None
        try:
            return self.repo[oid].tree[path].data
        except KeyError:
            return None

    def _blob(self, tree: pygit2.Tree, name: str) -> bytes:
        try:
            return tree[name].data
        except KeyError:
            raise JournalError(f"tree {tree.id} has no {name}: not a journal commit") from None

    def _json(self, tree: pygit2.Tree, name: str) -> Any:
        return json.loads(self._blob(tree, name))

    # --- writing -----------------------------------------------------------------------------

    def append(
        self,
        quest_id: str,
        expected_head: pygit2.Oid | None,
        decision: Decision,
        event: BaseEvent,
    ) -> pygit2.Oid:
        """Journal one accepted transition on top of ``expected_head`` (None: create the quest).

        Raises ``JournalConflict`` if the ref is not at ``expected_head`` when it is moved.
        The caller vouches that ``decision`` was decided against the quest at that head;
        ``journal.apply`` is the loop that guarantees it.
        """
        _check(quest_id, expected_head, decision, event)
        name = REF_PREFIX + quest_id
        ref = None
        if expected_head is None:
            if self.repo.references.get(name) is not None:  # cheap early answer; the real check
                raise JournalConflict(quest_id, None, self.head(quest_id), "it already exists")
        else:
            ref = self._refs.get(name)
            if ref is None or ref.target != expected_head:
                ref = self.repo.references.get(name)
                if ref is None or ref.target != expected_head:
                    actual = None if ref is None else ref.target
                    raise JournalConflict(quest_id, expected_head, actual)
        commit = self._commit(expected_head, decision, event)
        if ref is None:
            self._create_ref(quest_id, name, commit)
        else:
            self._move_ref(quest_id, ref, expected_head, commit)  # type: ignore[arg-type]
        return commit

    @contextmanager
    def locked(self, quest_id: str) -> Iterator[Locked]:
        """Hold the quest's ref lock for the block: load, decide and ``append`` in it cannot
        lose a race. For a writer that keeps losing them (``journal.apply`` switches to it);
        raises ``JournalConflict`` if another writer holds the lock right now."""
        name = REF_PREFIX + quest_id
        with self.repo.transaction() as txn:  # commits on exit; an exception rolls back
            try:
                txn.lock_ref(name)
            except (pygit2.GitError, OSError) as exc:
                reason = _conflict_text(exc)
                if reason is None:
                    raise
                raise JournalConflict(quest_id, None, None, reason) from exc
            quest, head = self.load(quest_id)  # read under the lock
            yield Locked(self, quest_id, txn, quest, head)

    def _commit(
        self, expected_head: pygit2.Oid | None, decision: Decision, event: BaseEvent
    ) -> pygit2.Oid:
        repo = self.repo
        if expected_head is None:
            builder = repo.TreeBuilder()
            parents: list[pygit2.Oid] = []
        else:
            parent_tree = self._trees.get(expected_head)
            if parent_tree is None:
                parent_tree = repo[expected_head].tree_id
            builder = repo.TreeBuilder(repo[parent_tree])
            parents = [expected_head]
        self._write_tree(builder, decision, event)
        tree = builder.write()
        sig = signature(event)
        message = commit_message(decision, event, expected_head)
        commit = repo.create_commit(None, sig, sig, message, tree, parents)
        self._remember(commit, tree)
        return commit

    def fast_forward(self, quest_id: str, expected: pygit2.Oid | None, new: pygit2.Oid) -> None:
        """Move the quest's ref from ``expected`` (None: absent) to ``new``, a descendant
        already in this repository (a fetched journal). CAS, like ``append``."""
        if expected is not None and not self.repo.descendant_of(new, expected):
            raise JournalError(f"{new} does not descend from {expected}: not a fast-forward")
        name = REF_PREFIX + quest_id
        if expected is None:
            self._create_ref(quest_id, name, new)
            return
        ref = self.repo.references.get(name)
        if ref is None or ref.target != expected:
            raise JournalConflict(quest_id, expected, None if ref is None else ref.target)
        self._move_ref(quest_id, ref, expected, new)

    def _remember(self, commit: pygit2.Oid, tree: pygit2.Oid) -> None:
        if len(self._trees) >= _CACHE_LIMIT:
            self._trees.clear()
        self._trees[commit] = tree

    def _move_ref(
        self, quest_id: str, ref: pygit2.Reference, expected: pygit2.Oid, new: pygit2.Oid
    ) -> None:
        try:
            ref.set_target(new)  # CAS: libgit2 compares with ref's old value under the lock
        except (pygit2.GitError, OSError) as exc:
            self._refs.pop(ref.name, None)
            reason = _conflict_text(exc)
            if reason is None:
                raise
            raise JournalConflict(quest_id, expected, self.head(quest_id), reason) from exc
        if len(self._refs) >= _CACHE_LIMIT:
            self._refs.clear()
        self._refs[ref.name] = ref

    def _create_ref(self, quest_id: str, name: str, new: pygit2.Oid) -> None:
        try:
            with self.repo.transaction() as txn:
                txn.lock_ref(name)
                # Read under the lock: every writer (libgit2 or git) takes the same lock file.
                if self.repo.references.get(name) is not None:
                    raise JournalConflict(quest_id, None, self.head(quest_id), "it already exists")
                txn.set_target(name, new)
        except (pygit2.GitError, OSError) as exc:
            reason = _conflict_text(exc)
            if reason is None:
                raise
            raise JournalConflict(quest_id, None, self.head(quest_id), reason) from exc

    def _write_tree(
        self, builder: pygit2.TreeBuilder, decision: Decision, event: BaseEvent
    ) -> None:
        """Rewrite what this transition changes; everything else is carried from the parent
        tree by oid (each loose object written costs a file, so unchanged blobs are never
        rewritten)."""
        repo = self.repo
        quest: Quest = decision.quest  # type: ignore[assignment]
        quest_dict = quest.to_dict()
        builder.insert(QUEST, repo.create_blob(pretty_json(quest_dict)), BLOB)
        builder.insert(EVENT, repo.create_blob(pretty_json(event_to_dict(event))), BLOB)
        builder.insert(DECISION, repo.create_blob(pretty_json(decision.to_dict())), BLOB)
        effects = pretty_json([e.to_dict() for e in decision.effects])
        self._put(builder, EFFECTS, effects)
        if decision.state_before is None:  # creation: the first signal stays for good
            signal = event.signal.model_dump(mode="json")  # type: ignore[attr-defined]
            builder.insert(SIGNAL, repo.create_blob(pretty_json(signal)), BLOB)
        self._put_text(builder, HYPOTHESIS, quest.hypothesis)
        self._put_text(builder, PLAN, quest.plan)
        etype = event.type  # type: ignore[attr-defined]
        if etype == "proof_completed":
            bundle = event.bundle.model_dump(mode="json")  # type: ignore[attr-defined]
            proof = {"bundle": bundle, "digest": event.digest}  # type: ignore[attr-defined]
            self._put_in(builder, PROOF_DIR, PROOF_FILE, pretty_json(proof))
        elif etype == "checkpoint_decided" and quest.decisions:
            record = quest.decisions[-1]
            if record.event == event.id:  # every accepted checkpoint decision is recorded
                data = quest_dict["decisions"][-1]
                name = f"{len(quest.decisions):03d}-{record.checkpoint}.json"
                self._put_in(builder, DECISIONS_DIR, name, pretty_json(data))

    def _put(self, builder: pygit2.TreeBuilder, name: str, data: bytes) -> None:
        # Hashing is ~1000x cheaper than writing a loose object that already exists.
        entry = builder.get(name)
        if entry is not None and entry.id == pygit2.hash(data):
            return
        builder.insert(name, self.repo.create_blob(data), BLOB)

    def _put_text(self, builder: pygit2.TreeBuilder, name: str, text: str) -> None:
        if text:
            self._put(builder, name, text_file(text))
        elif builder.get(name) is not None:
            builder.remove(name)  # the field was cleared

    def _put_in(self, builder: pygit2.TreeBuilder, folder: str, name: str, data: bytes) -> None:
        entry = builder.get(folder)
        repo = self.repo
        sub = repo.TreeBuilder() if entry is None else repo.TreeBuilder(repo[entry.id])
        sub.insert(name, self.repo.create_blob(data), BLOB)
        builder.insert(folder, sub.write(), TREE)


class Locked:
    """A quest whose ref lock is held (``Journal.locked``): its quest and head cannot move."""

    def __init__(
        self,
        journal: Journal,
        quest_id: str,
        txn: Any,
        quest: Quest | None,
        head: pygit2.Oid | None,
    ) -> None:
        self.journal, self.quest_id, self._txn = journal, quest_id, txn
        self.quest, self.head = quest, head

    def append(self, decision: Decision, event: BaseEvent) -> pygit2.Oid:
        """Journal one accepted transition on the locked head; the ref moves when the
        ``locked`` block ends."""
        _check(self.quest_id, self.head, decision, event)
        commit = self.journal._commit(self.head, decision, event)
        self._txn.set_target(REF_PREFIX + self.quest_id, commit)
        self.head = commit
        return commit


def _check(
    quest_id: str, expected: pygit2.Oid | None, decision: Decision, event: BaseEvent
) -> None:
    if not decision.accepted:
        raise JournalError(f"only accepted transitions are journaled, not {decision.outcome}")
    if not (decision.quest_id == quest_id == event.quest) or decision.event_id != event.id:
        raise JournalError(
            f"decision {decision.quest_id}/{decision.event_id} does not match "
            f"event {event.quest}/{event.id} for quest {quest_id}"
        )
    if (expected is None) != (decision.state_before is None):
        raise JournalError(
            f"{quest_id}: a creation (and only a creation) is appended with no expected head; "
            f"got head {hex_or_none(expected)} for a decision from {decision.state_before}"
        )
