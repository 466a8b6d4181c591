"""The event ids a quest's journal has used, and the ``ids/`` index that finds one cheaply.

A quest takes each event id once (docs/journal.md, "Event ids"). To answer "did this journal
use id X, and where?" without reading the whole history, a commit's tree carries an index,
``ids/0`` … ``ids/f``: text files of ``<event id> <event type> <commit>`` lines, sorted, the
file chosen by the first hex digit of the id's SHA-1. An index lists every event journaled
before the commit that wrote it (a commit cannot name itself). It is written again only once
``INDEX_EVERY`` commits are not listed in it, and otherwise carried to the next commit by oid:
most quests never reach that many events and their commits carry no index at all, so an append
writes no more objects than before. A lookup reads the unlisted commits (the head and its
parents back to the commit that wrote the index: fewer than ``INDEX_EVERY``, and remembered by
the journal instance), then one file of the index.

A journal written before the index existed has none: its first index lists its whole history,
read once, when the next transition is appended.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import pygit2

from ephyra.core.events import BaseEvent, event_to_dict
from journal.errors import JournalError
from journal.format import (
    BLOB,
    EVENT,
    IDS_DIR,
    INDEX_EVERY,
    TREE,
    id_bucket,
    index_file,
    pretty_json,
    read_index_file,
    read_json,
    trailers,
    tree_bytes,
)

Entries = dict[str, tuple[int, pygit2.Oid]]  # a tree's entries: name -> (filemode, oid)
Rows = dict[str, tuple[str, str]]  # an ids/ file: event id -> (event type, commit hex)
# What the check needs of a commit: its event's id and type, its parent, the oid of the ids/ tree
# it carries (None: no index yet), and how many commits that index does not list, counting this
# one (the commit itself and its parents back to the one that wrote the index).
Link = tuple[str, str, pygit2.Oid | None, pygit2.Oid | None, int]

_LIMIT = 65536  # links remembered; small, and every event walks up to INDEX_EVERY of them
_BLOB, _TREE = pygit2.GIT_OBJECT_BLOB, pygit2.GIT_OBJECT_TREE


class Used(NamedTuple):
    """Where a journal used an event id: the commit that journaled the event, and its type."""

    commit: pygit2.Oid
    type: str


class EventIds:
    """The event-id index of one ``Journal`` (it reads trees and writes objects through the
    journal's own ``entries`` and ``write``, so a pack being written receives these too)."""

    def __init__(
        self,
        repo: pygit2.Repository,
        entries: Callable[[pygit2.Oid, pygit2.Commit | None], Entries],
        write: Callable[[int, bytes], pygit2.Oid],
    ) -> None:
        self.repo, self._entries, self._write = repo, entries, write
        # By oid, so none of it goes stale: a commit's Link, an ids/ tree's entries and an ids/
        # file's rows.
        self._links: dict[pygit2.Oid, Link] = {}
        self._trees: dict[pygit2.Oid, Entries] = {}
        self._rows: dict[pygit2.Oid, Rows] = {}

    def used(self, head: pygit2.Oid, event_id: str) -> Used | None:
        """Where the journal ending at ``head`` journaled an event with id ``event_id`` (None:
        nowhere): the unlisted commits first, then one file of the index."""
        link = self.link(head)
        index, links, oid = link[3], self._links, head
        for _ in range(link[4]):  # the unlisted commits, newest first; a plain loop: every event
            if link[0] == event_id:
                return Used(oid, link[1])
            oid = link[2]  # type: ignore[assignment]
            if oid is None:
                break
            link = links.get(oid) or self.link(oid)
        if index is None:
            return None
        row = self._file(index, id_bucket(event_id)).get(event_id)
        return None if row is None else Used(pygit2.Oid(hex=row[1]), row[0])

    def same_event(self, commit: pygit2.Oid, event: BaseEvent) -> bool:
        """Whether ``commit`` journaled exactly ``event``: its ``event.json`` is the blob
        ``event`` would be written as (an exact redelivery, not another event under its id)."""
        entry = self._entries(commit, None).get(EVENT)
        return entry is not None and entry[1] == pygit2.hash(pretty_json(event_to_dict(event)))

    def link(self, oid: pygit2.Oid) -> Link:
        """What the check needs of commit ``oid`` (read once, then remembered). A commit not
        remembered is read with its unremembered parents back to the one that wrote its index:
        their counts build on each other (in a loop, however long a journal without an index)."""
        link = self._links.get(oid)
        if link is not None:
            return link
        chain = []  # read, newest first, until the count can be taken from a known parent
        below: Link | None = None
        while True:
            key, etype, parent, index = self._read(oid)
            chain.append((oid, key, etype, parent, index))
            if parent is None:
                break
            below = self._links.get(parent)
            if below is not None:
                break
            parent_index = self._entries(parent, None).get(IDS_DIR)
            if (parent_index and parent_index[1]) != index:
                below = None  # the parent predates this index: the count starts here
                break
            oid = parent
        for oid, key, etype, parent, index in reversed(chain):
            count = below[4] + 1 if below is not None and below[3] == index else 1
            below = (key, etype, parent, index, count)
            self._remember(self._links, oid, below)
        return below  # type: ignore[return-value]

    def _read(self, oid: pygit2.Oid) -> tuple[str, str, pygit2.Oid | None, pygit2.Oid | None]:
        """A commit's event id and type, parent and ids/ tree, from Git."""
        commit = self.repo[oid]
        parents = commit.parent_ids  # type: ignore[attr-defined]
        if len(parents) > 1:
            raise JournalError(f"{oid} has {len(parents)} parents: a journal is linear")
        entries = self._entries(oid, commit)  # type: ignore[arg-type]
        fields = trailers(commit.message)  # type: ignore[attr-defined]
        key, etype = fields.get("Ephyra-Event"), fields.get("Ephyra-Event-Type")
        if key is None or etype is None:  # not in the message: read the event itself
            if EVENT not in entries:
                raise JournalError(f"commit {oid} has no {EVENT}: not a journal commit")
            data = read_json(self.repo[entries[EVENT][1]].data)  # type: ignore[attr-defined]
            key, etype = data["id"], data["type"]
        index = entries.get(IDS_DIR)
        return key, etype, parents[0] if parents else None, index and index[1]

    def written(
        self,
        commit: pygit2.Oid,
        event_id: str,
        event_type: str,
        parent: pygit2.Oid | None,
        entries: Entries,
    ) -> None:
        """Remember the Link of a commit the journal just wrote (no read needed)."""
        entry = entries.get(IDS_DIR)
        index = entry and entry[1]
        below = None if parent is None else self.link(parent)
        count = below[4] + 1 if below is not None and below[3] == index else 1
        self._remember(self._links, commit, (event_id, event_type, parent, index, count))

    def index_after(self, entries: Entries, parent: pygit2.Oid) -> None:
        """Put a new ids/ index into ``entries`` (the tree of the commit to come on
        ``parent``) when ``INDEX_EVERY`` commits are not listed in the one it carries: the old
        index's rows plus theirs. Otherwise the carried index stays as it is."""
        link = self.link(parent)
        if link[4] < INDEX_EVERY:
            return
        old = link[3]
        files = {} if old is None else dict(self._tree(old))
        added: dict[str, Rows] = {}
        # All of them: a journal written before the index existed lists none, however long.
        for key, etype, oid in self._unlisted(parent, link):
            added.setdefault(id_bucket(key), {})[key] = (etype, str(oid))
        for name, rows in added.items():
            merged = rows if old is None else {**self._file(old, name), **rows}
            blob = self._write(_BLOB, index_file(merged))
            self._remember(self._rows, blob, merged)
            files[name] = (BLOB, blob)
        tree = self._write(_TREE, tree_bytes(files))
        self._remember(self._trees, tree, files)
        entries[IDS_DIR] = (TREE, tree)

    def problem(self, head: pygit2.Oid, history: list[tuple[pygit2.Oid, str, str]]) -> str | None:
        """Why the index at ``head`` is not the one the journal writes, or None when it is (or
        when there is none). ``history`` is (commit, event id, event type) of every commit from
        the creation to ``head``. The index must list exactly the events of the commits before
        the one that wrote it, one file per first hex digit, each file as ``index_file`` writes
        it: the next events' lookups depend on it. (An earlier index was checked by the
        decisions: one that hid a used id let an event in that the replay refuses.)"""
        link = self.link(head)
        if link[3] is None:
            return None
        expected: dict[str, Rows] = {}
        for oid, key, etype in history[: len(history) - link[4]]:
            expected.setdefault(id_bucket(key), {})[key] = (etype, str(oid))
        files = self._tree(link[3])
        for name in sorted(set(files) | set(expected)):
            rows = expected.get(name, {})
            entry = files.get(name)
            if entry is None or entry[1] != pygit2.hash(index_file(rows)):
                return f"{head}: {IDS_DIR}/{name} does not list the events journaled before it"
        return None

    def _unlisted(self, oid: pygit2.Oid, link: Link) -> Iterator[tuple[str, str, pygit2.Oid]]:
        """(event id, event type, commit) of ``oid`` and of each parent before it that its
        index does not list, newest first."""
        for _ in range(link[4]):
            yield link[0], link[1], oid
            if link[2] is None:
                return
            oid = link[2]
            link = self.link(oid)

    def _file(self, index: pygit2.Oid, name: str) -> Rows:
        """The rows of file ``name`` of the ids/ tree ``index`` (empty when it has none)."""
        entry = self._tree(index).get(name)
        if entry is None:
            return {}
        rows = self._rows.get(entry[1])
        if rows is None:
            try:
                rows = read_index_file(self.repo[entry[1]].data)  # type: ignore[attr-defined]
            except ValueError:
                raise JournalError(f"{IDS_DIR}/{name} ({entry[1]}) is not an index file") from None
            self._remember(self._rows, entry[1], rows)
        return rows

    def _tree(self, oid: pygit2.Oid) -> Entries:
        entries = self._trees.get(oid)
        if entries is None:
            tree: pygit2.Tree = self.repo[oid]  # type: ignore[assignment]
            entries = {item.name: (item.filemode, item.id) for item in tree}
            self._remember(self._trees, oid, entries)
        return entries

    @staticmethod
    def _remember(cache: dict, oid: pygit2.Oid, value: object) -> None:
        if len(cache) >= _LIMIT:
            cache.clear()
        cache[oid] = value
