"""The Git journal: one ref per quest, one commit per accepted transition, written by CAS.

A quest lives at ``refs/ephyra/quests/<id>``. Each commit's tree holds the quest after the event
(``quest.json``), the event, the effects it asked for, the quest's files and, once the quest has
many events, the index of the event ids it used (``journal.event_ids``); its message's
trailers hold the decision, so a person can read everything with plain ``git``
(``docs/journal.md``). Git is the truth: the
database projection is rebuilt from here, and the pending effects are in the commit so nothing
is lost between the Git write and the database write.

Moving a ref is a compare-and-swap, never a forced update:
- an existing ref moves with ``Reference.set_target``, which libgit2 checks under the ref's lock
  against the value the ``Reference`` was read with ("old reference value does not match");
- a new ref is created inside ``repo.transaction()``: lock it, read it under the lock, set it
  only if still absent. ``references.create(force=False)`` checks existence *before* it takes
  the lock, so two creators could both pass the check; the transaction cannot.
Either way a lost race raises ``JournalConflict``; ``journal.apply`` reloads and decides again.

Objects are written as bytes (``journal.format.tree_bytes``/``commit_bytes``) rather than
through ``TreeBuilder`` and ``create_commit``: those read every object they are handed back
from disk to check that it exists, which is a file read per tree entry, per tree and per
parent on every append. Here every oid is one just written or one carried from the parent's
tree, so the check cannot fail.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import pygit2

from ephyra.core.events import BaseEvent, event_to_dict, parse_event
from ephyra.core.machine import Decision
from ephyra.core.quest import Quest
from journal.errors import JournalConflict, JournalError
from journal.event_ids import EventIds
from journal.format import (
    BLOB,
    DECISIONS_DIR,
    EFFECTS,
    EMPTY_EFFECTS,
    EVENT,
    HYPOTHESIS,
    LEGACY_DECISION,
    PLAN,
    PROOF_DIR,
    PROOF_FILE,
    QUEST,
    REF_PREFIX,
    SIGNAL,
    TREE,
    Entry,
    commit_bytes,
    commit_message,
    hex_or_none,
    pretty_json,
    read_json,
    recorded_decision,
    text_file,
    trailers,
    tree_bytes,
)
from journal.pack import PackWriter, consolidate

_CACHE_LIMIT = 8192  # entries per cache; past it a cache starts over (it only saves reads)
_BLOB, _TREE, _COMMIT = pygit2.GIT_OBJECT_BLOB, pygit2.GIT_OBJECT_TREE, pygit2.GIT_OBJECT_COMMIT
_EMPTY_EFFECTS = pygit2.hash(EMPTY_EFFECTS)

Entries = dict[str, tuple[int, pygit2.Oid]]  # a tree's entries: name -> (filemode, oid)


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
        self._objects, self._fsync = objects_dir(self.repo), fsync_objects(self.repo)
        self._loose = self._write = loose_writer(self.repo)
        # Reference objects this instance last moved, by ref name. set_target on one of them is
        # a CAS against the value it holds, so a stale cached object can only fail, never clobber.
        self._refs: dict[str, pygit2.Reference] = {}
        # What this instance knows of commits it wrote or read, by commit oid (a commit never
        # changes, so none of this goes stale): the root tree's entries, which the next append
        # builds on (and a subtree's, by the subtree's oid); the quest in quest.json; the
        # event-id index's knowledge (journal.event_ids). Each saves reads from disk.
        self._trees: dict[pygit2.Oid, Entries] = {}
        self._quests: dict[pygit2.Oid, Quest] = {}
        self._dicts: dict[pygit2.Oid, dict[str, Any]] = {}  # quest.json of commits written here
        # Written through self._write at the time of the call: into the pack while packing.
        self.ids = EventIds(self.repo, self._entries, lambda kind, data: self._write(kind, data))

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

    def heads(self) -> dict[str, pygit2.Oid]:
        """Every quest's head, in one pass over the references."""
        n = len(REF_PREFIX)
        return {
            ref.name[n:]: ref.target
            for ref in self.repo.references.iterator()
            if ref.name.startswith(REF_PREFIX)
        }

    def load(self, quest_id: str) -> tuple[Quest | None, pygit2.Oid | None]:
        """The quest at its head and the head's oid, or ``(None, None)`` for an unknown quest."""
        head = self.head(quest_id)
        if head is None:
            return None, None
        return self.quest_at(head), head

    def quest_at(self, oid: pygit2.Oid) -> Quest:
        quest = self._quests.get(oid)
        if quest is None:
            entries = self._entries(oid)
            quest = Quest.from_dict(read_json(self._data(oid, entries, QUEST)))
            self._remember(self._quests, oid, quest)
        return quest

    def event_id(self, oid: pygit2.Oid) -> str:
        """The id of the event a journal commit records (its ``Ephyra-Event`` trailer)."""
        return self.ids.link(oid)[0]

    def entry(self, oid: pygit2.Oid) -> Entry:
        commit = self.repo[oid]
        entries = self._entries(oid, commit)
        effects = self.effects(oid)
        try:
            decision = recorded_decision(commit.message, effects)
        except (KeyError, ValueError):
            if LEGACY_DECISION not in entries:
                raise JournalError(f"{oid} has no Ephyra trailers: not a journal commit") from None
            decision = read_json(self._data(oid, entries, LEGACY_DECISION))
        return Entry(
            oid,
            parse_event(self._data(oid, entries, EVENT)),
            decision,
            self.quest_at(oid),
            effects,
        )

    def effects(self, oid: pygit2.Oid) -> list[dict[str, Any]]:
        """The effects a journal commit asked for (its ``effects.json``)."""
        known = self._trees.get(oid)
        if known is not None:
            entry = known.get(EFFECTS)
            if entry is not None and entry[1] == _EMPTY_EFFECTS:
                return []
            return read_json(self._data(oid, known, EFFECTS))
        try:  # one entry of the tree, not all of them (repair reads every commit this way)
            blob = self.repo[oid].tree[EFFECTS]
        except KeyError:
            raise JournalError(f"commit {oid} has no {EFFECTS}: not a journal commit") from None
        return [] if blob.id == _EMPTY_EFFECTS else read_json(blob.data)  # type: ignore[attr-defined]

    def quest_data(self, oid: pygit2.Oid) -> dict[str, Any]:
        """``quest.json`` of a journal commit, parsed but not turned into a Quest (for a commit
        this instance wrote, the dict it was written from: read it, do not change it)."""
        known = self._dicts.get(oid)
        if known is not None:
            return known
        try:
            return read_json(self.repo[oid].tree[QUEST].data)  # type: ignore[attr-defined]
        except KeyError:
            raise JournalError(f"commit {oid} has no {QUEST}: not a journal commit") from None

    def since(self, head: pygit2.Oid, stop: pygit2.Oid | None = None) -> Since:
        """What repair reads of a journal: ``quest.json`` at ``head``, and the effects of every
        commit from ``head`` back to ``stop`` (left out; None: to the creation), newest first.
        Each commit and tree is read once, and an empty ``effects.json`` not at all."""
        commit = self.repo[head]
        try:
            quest = commit.tree[QUEST].data  # type: ignore[attr-defined]
        except KeyError:
            raise JournalError(f"commit {head} has no {QUEST}: not a journal commit") from None
        effects: list[tuple[pygit2.Oid, list[dict[str, Any]]]] = []
        events: list[str] = []
        oid: pygit2.Oid | None = head
        while oid is not None and oid != stop:
            if commit is None:
                commit = self.repo[oid]
            event = trailers(commit.message).get("Ephyra-Event")  # type: ignore[attr-defined]
            if event is not None:
                events.append(event)
            parents = commit.parent_ids  # type: ignore[attr-defined]
            if len(parents) > 1:
                raise JournalError(f"{oid} has {len(parents)} parents: a journal is linear")
            try:
                blob = commit.tree[EFFECTS]  # type: ignore[attr-defined]
            except KeyError:
                raise JournalError(f"commit {oid} has no {EFFECTS}: not a journal commit") from None
            if blob.id != _EMPTY_EFFECTS:
                effects.append((oid, read_json(blob.data)))
            oid, commit = (parents[0] if parents else None), None
        return Since(quest, effects, events)

    def history(self, quest_id: str) -> list[Entry]:
        """Every transition of the quest, oldest first."""
        head = self.head(quest_id)
        if head is None:
            return []
        entries = [self.entry(oid) for oid in self.commits(head)]
        entries.reverse()
        return entries

    def commits(self, head: pygit2.Oid, stop: pygit2.Oid | None = None) -> Iterator[pygit2.Oid]:
        """The journal's commits from ``head`` back to the creation (or to ``stop``, left out),
        newest first.

        A journal is linear by construction (CAS appends, fast-forward-only pushes); a merge
        commit means someone wrote here by hand, and guessing which parent is the truth would
        be worse than stopping.
        """
        oid: pygit2.Oid | None = head
        while oid is not None and oid != stop:
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

    def _entries(self, oid: pygit2.Oid, commit: pygit2.Commit | None = None) -> Entries:
        """The root tree entries of commit ``oid`` (``commit``, when the caller has it)."""
        entries = self._trees.get(oid)
        if entries is None:
            tree = (commit or self.repo[oid]).tree  # type: ignore[union-attr]
            entries = {item.name: (item.filemode, item.id) for item in tree}
            self._remember(self._trees, oid, entries)
        return entries

    def _data(self, oid: pygit2.Oid, entries: Entries, name: str) -> bytes:
        entry = entries.get(name)
        if entry is None:
            raise JournalError(f"commit {oid} has no {name}: not a journal commit")
        return self.repo[entry[1]].data  # type: ignore[attr-defined]

    @staticmethod
    def _remember(cache: dict, oid: pygit2.Oid, value: Any) -> None:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[oid] = value

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
        commit = self.stage(quest_id, expected_head, decision, event)
        self.publish(quest_id, expected_head, commit)
        return commit

    def stage(
        self,
        quest_id: str,
        expected_head: pygit2.Oid | None,
        decision: Decision,
        event: BaseEvent,
    ) -> pygit2.Oid:
        """Write the objects of one accepted transition on top of ``expected_head`` (inside
        ``packing``, into the pack) and return its commit; ``publish`` moves the ref. Raises
        ``JournalConflict`` early when the ref has already moved: no objects are written then.
        """
        _check(quest_id, expected_head, decision, event)
        self._ref_at(quest_id, expected_head)
        return self._commit(expected_head, decision, event)

    def publish(self, quest_id: str, expected_head: pygit2.Oid | None, commit: pygit2.Oid) -> None:
        """Move the quest's ref from ``expected_head`` (None: create it) to ``commit``, whose
        objects are in the repository: a compare-and-swap, ``JournalConflict`` if it moved."""
        ref = self._ref_at(quest_id, expected_head)
        if ref is None:
            self._create_ref(quest_id, REF_PREFIX + quest_id, commit)
        else:
            self._move_ref(quest_id, ref, expected_head, commit)  # type: ignore[arg-type]

    def _ref_at(self, quest_id: str, expected: pygit2.Oid | None) -> pygit2.Reference | None:
        """The quest's ref, as last seen at ``expected`` (None when the quest is to be
        created); ``JournalConflict`` when it is not there. The real check is the CAS."""
        name = REF_PREFIX + quest_id
        if expected is None:
            if self.repo.references.get(name) is not None:
                raise JournalConflict(quest_id, None, self.head(quest_id), "it already exists")
            return None
        ref = self._refs.get(name)
        if ref is None or ref.target != expected:
            ref = self.repo.references.get(name)
            if ref is None or ref.target != expected:
                raise JournalConflict(quest_id, expected, None if ref is None else ref.target)
        return ref

    @contextmanager
    def packing(self) -> Iterator[None]:
        """Inside the block, the objects ``stage`` writes are kept in memory, and written as
        one pack when the block ends (nothing, when it raises): one group's transitions cost
        two files instead of a loose file per object. Publish their refs after the block."""
        writer = PackWriter(self._objects, fsync=self._fsync)
        self._write = writer.add
        try:
            yield
        finally:
            self._write = self._loose
        writer.write()

    def consolidate(self) -> bool:
        """Pack the loose objects and merge the packs once there are many
        (``journal.pack.consolidate``)."""
        return consolidate(self.repo.path, self._objects)

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
        """Write the transition's objects; every one is in the repository before a ref can
        point at the commit (the ref is the truth)."""
        entries = {} if expected_head is None else dict(self._entries(expected_head))
        quest: Quest = decision.quest  # type: ignore[assignment]
        quest_dict = self._write_files(entries, decision, event, quest)
        if expected_head is not None:
            self.ids.index_after(entries, expected_head)
        tree = self._write(_TREE, tree_bytes(entries))
        message = commit_message(decision, event, expected_head)
        commit = self._write(_COMMIT, commit_bytes(tree, expected_head, event, message))
        self._remember(self._trees, commit, entries)
        self._remember(self._quests, commit, quest)
        self.ids.written(commit, event.id, decision.event_type, expected_head, entries)
        self._remember(self._dicts, commit, quest_dict)
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

    def _write_files(
        self, entries: Entries, decision: Decision, event: BaseEvent, quest: Quest
    ) -> dict[str, Any]:
        """Rewrite what this transition changes; everything else is carried from the parent
        tree by oid (each loose object written costs a file, so unchanged blobs are never
        rewritten). Returns the quest's dict, as written to ``quest.json``."""
        write = self._write
        quest_dict = quest.to_dict()
        entries[QUEST] = (BLOB, write(_BLOB, pretty_json(quest_dict)))
        entries[EVENT] = (BLOB, write(_BLOB, pretty_json(event_to_dict(event))))
        entries.pop(LEGACY_DECISION, None)  # the trailers say it now
        if decision.effects:
            effects = pretty_json([e.to_dict() for e in decision.effects])
            entries[EFFECTS] = (BLOB, write(_BLOB, effects))
        elif entries.get(EFFECTS, (0, None))[1] != _EMPTY_EFFECTS:
            entries[EFFECTS] = (BLOB, write(_BLOB, EMPTY_EFFECTS))
        if decision.state_before is None:  # creation: the first signal stays for good
            signal = event.signal.model_dump(mode="json")  # type: ignore[attr-defined]
            entries[SIGNAL] = (BLOB, write(_BLOB, pretty_json(signal)))
        self._put_text(entries, HYPOTHESIS, quest.hypothesis)
        self._put_text(entries, PLAN, quest.plan)
        etype = event.type  # type: ignore[attr-defined]
        if etype == "proof_completed":
            bundle = event.bundle.model_dump(mode="json")  # type: ignore[attr-defined]
            proof = {"bundle": bundle, "digest": event.digest}  # type: ignore[attr-defined]
            self._put_in(entries, PROOF_DIR, PROOF_FILE, pretty_json(proof))
        elif etype == "checkpoint_decided" and quest.decisions:
            record = quest.decisions[-1]
            if record.event == event.id:  # every accepted checkpoint decision is recorded
                data = quest_dict["decisions"][-1]
                name = f"{len(quest.decisions):03d}-{record.checkpoint}.json"
                self._put_in(entries, DECISIONS_DIR, name, pretty_json(data))
        return quest_dict

    def _put_text(self, entries: Entries, name: str, text: str) -> None:
        if not text:
            entries.pop(name, None)  # the field was cleared
            return
        data = text_file(text)
        entry = entries.get(name)
        # Hashing is ~1000x cheaper than writing a loose object that already exists.
        if entry is None or entry[1] != pygit2.hash(data):
            entries[name] = (BLOB, self._write(_BLOB, data))

    def _put_in(self, entries: Entries, folder: str, name: str, data: bytes) -> None:
        entry = entries.get(folder)
        sub: Entries = {}
        if entry is not None:
            known = self._trees.get(entry[1])  # a subtree is remembered by its own oid
            sub = (
                dict(known) if known else {i.name: (i.filemode, i.id) for i in self.repo[entry[1]]}
            )
        sub[name] = (BLOB, self._write(_BLOB, data))
        tree = self._write(_TREE, tree_bytes(sub))
        self._remember(self._trees, tree, sub)
        entries[folder] = (TREE, tree)


def objects_dir(repo: pygit2.Repository) -> str:
    """The repository's object directory (a linked worktree keeps its objects in the main
    repository's)."""
    git_dir = repo.path
    common = os.path.join(git_dir, "commondir")
    if os.path.isfile(common):
        with open(common, encoding="utf-8") as handle:
            git_dir = os.path.join(git_dir, handle.read().strip())
    return os.path.join(git_dir, "objects")


def fsync_objects(repo: pygit2.Repository) -> bool:
    """Whether object files are fsynced: the repository's ``core.fsyncObjectFiles`` (libgit2
    also follows the process-wide ``pygit2.settings.enable_fsync_gitdir``)."""
    config = repo.config
    return "core.fsyncObjectFiles" in config and config.get_bool("core.fsyncObjectFiles")


def loose_writer(repo: pygit2.Repository) -> Callable[[int, bytes], pygit2.Oid]:
    """Write objects as loose files straight into the repository's object directory.

    The repository's own object database, for every object it does not have yet, also rescans
    the pack directory in case another process added a pack (six system calls per object). A
    journal object is new by construction (its commit, tree, quest and event are unique), and a
    loose copy of an object that is also packed would be harmless. fsync follows
    ``fsync_objects``, as libgit2's own writer does.
    """
    odb = pygit2.Odb()
    odb.add_backend(pygit2.OdbBackendLoose(objects_dir(repo), -1, fsync_objects(repo)), 1)
    return odb.write


class Since(NamedTuple):
    """``Journal.since``: the head's ``quest.json`` as stored, (commit, effects) of each
    commit read that asked for any, and the id of every event read, newest first."""

    quest: bytes
    effects: list[tuple[pygit2.Oid, list[dict[str, Any]]]]
    events: list[str]


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
