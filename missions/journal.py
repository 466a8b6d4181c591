"""The mission journal: one ref per mission, one commit per decision, written by CAS.

A mission lives at ``refs/ephyra/missions/<id>`` in its workspace's mirror, beside the quest
journals (``journal.store``) and in the same style, so a person reads it with plain ``git``
(docs/missions.md, "The journal"). Each commit's tree holds three files:

- ``mission.json``: the mission after the decision, as the pure machine returned it
  (``ephyra.core.mission.Mission``: state, work packages, the attempt ledger, ``supersedes``);
- ``quests.json``: which quest carries which work package (``{"wp1": "q-…"}``), the one thing
  the machine does not know;
- ``request.json``: the request that was decided: its kind, who asked in which role, the
  evidence (with what each item is: text, a link, a file's SHA-256, a quest's proof digest),
  when, under which request id. Replaying these through the machine gives every
  ``mission.json`` again (``replay_mission``).

The commit's time is the request's, and its message's trailers say what moved
(``Ephyra-Mission``, ``Ephyra-Kind``, ``Ephyra-Subject``, ``Ephyra-Previous-State``,
``Ephyra-State``, ``Ephyra-Revision``, ``Ephyra-Request``, ``Ephyra-Previous-Head``).

The ref moves by compare-and-swap, never forced, as ``journal.store`` moves a quest's: an
existing ref with ``Reference.set_target`` (libgit2 compares under the ref's lock), a new one
inside ``repo.transaction()`` after reading it under the lock. A lost race raises
``MissionConflict``; ``missions.services`` reloads and decides again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pygit2

from ephyra.core.mission import (
    AttemptEntry,
    Mission,
    MissionState,
    Role,
    WorkPackage,
    WPState,
)
from journal.errors import JournalError
from journal.format import BLOB, commit_at, pretty_json, read_json, trailers, tree_bytes
from journal.store import loose_writer

REF_PREFIX = "refs/ephyra/missions/"
MISSION, QUESTS, REQUEST = "mission.json", "quests.json", "request.json"


class MissionConflict(JournalError):
    """The mission's ref is not where the writer expected: someone else wrote first."""

    def __init__(self, mission_id: str, reason: str = "the ref moved") -> None:
        self.mission_id, self.reason = mission_id, reason
        super().__init__(f"{REF_PREFIX}{mission_id}: {reason}")


# --- the mission as JSON -----------------------------------------------------------------------


def mission_to_dict(mission: Mission) -> dict[str, Any]:
    """``mission.json``: the machine's ``Mission``, work packages in the order they were added."""
    return {
        "id": mission.mission_id,
        "title": mission.title,
        "state": str(mission.state),
        "created_at": mission.created_at.isoformat(),
        "updated_at": mission.updated_at.isoformat(),
        "supersedes": mission.supersedes,
        "work_packages": [
            {
                "id": wp.wp_id,
                "title": wp.title,
                "state": str(wp.state),
                "makers": list(wp.makers),
                "checker": wp.checker,
                "supersedes": wp.supersedes,
            }
            for wp in mission.work_packages.values()
        ],
        "ledger": [
            {
                "sequence": entry.sequence,
                "subject": entry.subject,
                "subject_kind": entry.subject_kind,
                "from": str(entry.from_state),
                "to": str(entry.to_state),
                "actor": entry.actor,
                "role": str(entry.role),
                "evidence": [list(pair) for pair in entry.evidence],
                "reason": entry.reason,
                "at": entry.at.isoformat(),
                "request_id": entry.request_id,
            }
            for entry in mission.ledger
        ],
    }


def mission_from_dict(data: dict[str, Any]) -> Mission:
    """The ``Mission`` a ``mission.json`` holds (``mission_to_dict`` read back)."""
    wps = {
        wp["id"]: WorkPackage(
            wp_id=wp["id"],
            title=wp["title"],
            state=WPState(wp["state"]),
            makers=tuple(wp["makers"]),
            checker=wp["checker"],
            supersedes=wp["supersedes"],
        )
        for wp in data["work_packages"]
    }
    ledger = tuple(
        AttemptEntry(
            sequence=entry["sequence"],
            subject=entry["subject"],
            subject_kind=entry["subject_kind"],
            from_state=entry["from"],
            to_state=entry["to"],
            actor=entry["actor"],
            role=Role(entry["role"]),
            evidence=tuple((name, text) for name, text in entry["evidence"]),
            reason=entry["reason"],
            at=datetime.fromisoformat(entry["at"]),
            request_id=entry["request_id"],
        )
        for entry in data["ledger"]
    )
    return Mission(
        mission_id=data["id"],
        title=data["title"],
        created_at=datetime.fromisoformat(data["created_at"]),
        updated_at=datetime.fromisoformat(data["updated_at"]),
        state=MissionState(data["state"]),
        work_packages=MappingProxyType(wps),
        ledger=ledger,
        supersedes=data["supersedes"],
    )


# --- what a commit holds ---------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """A mission at one journal commit: the mission, its quest links, the decided request."""

    commit: pygit2.Oid
    mission: Mission
    links: dict[str, str]  # wp id -> quest id
    request: dict[str, Any]
    revision: int


@dataclass(frozen=True)
class Move:
    """What a decision moved, for the commit message's trailers and the audit entry."""

    kind: str  # create, add_wp, mission, wp, supersede_wp, supersede_mission, link
    subject: str  # the mission's or the work package's id
    before: str | None  # its state before (None: it did not exist)
    after: str


def _one_line(text: str) -> str:
    return " ".join(str(text).split())  # a title or a name cannot forge lines or trailers


def commit_message(mission_id: str, move: Move, request: dict, revision: int, parent) -> str:
    if move.before is None:
        what = f"new {move.subject} → {move.after}"
    elif move.before != move.after:
        what = f"{move.subject} {move.before} → {move.after}"
    else:
        what = f"{move.subject} {move.after}"
    if move.kind == "supersede_wp":
        what += f", superseded by {request['new_id']}"
    elif move.kind == "supersede_mission":
        what += f", superseding {request['subject']}"
    elif move.kind == "link":
        what += f", carried by quest {request['quest']}"
    role = f" as {request['role']}" if request.get("role") else ""
    evidence = ", ".join(sorted(request.get("evidence", {}))) or "none"
    return (
        f"{mission_id}: {what} ({move.kind})\n\n"
        f"By {_one_line(request['actor'])}{role} at {request['at']}. Evidence: {evidence}.\n\n"
        f"Ephyra-Mission: {mission_id}\n"
        f"Ephyra-Kind: {move.kind}\n"
        f"Ephyra-Subject: {move.subject}\n"
        f"Ephyra-Previous-State: {move.before or 'none'}\n"
        f"Ephyra-State: {move.after}\n"
        f"Ephyra-Revision: {revision}\n"
        f"Ephyra-Request: {request['request_id']}\n"
        f"Ephyra-Previous-Head: {parent or 'none'}\n"
    )


class MissionJournal:
    """The mission journals of one repository (the workspace's mirror). One per thread."""

    def __init__(self, path: str | Path | pygit2.Repository) -> None:
        self.repo = path if isinstance(path, pygit2.Repository) else pygit2.Repository(str(path))
        self._write = loose_writer(self.repo)
        self._snapshots: dict[pygit2.Oid, Snapshot] = {}  # a commit never changes

    # --- reading ---------------------------------------------------------------------------

    def head(self, mission_id: str) -> pygit2.Oid | None:
        ref = self.repo.references.get(REF_PREFIX + mission_id)
        return None if ref is None else ref.target

    def heads(self) -> dict[str, pygit2.Oid]:
        """Every mission's head, in one pass over the references."""
        n = len(REF_PREFIX)
        return {
            ref.name[n:]: ref.target
            for ref in self.repo.references.iterator()
            if ref.name.startswith(REF_PREFIX)
        }

    def load(self, mission_id: str) -> Snapshot | None:
        """The mission at its head, or None for a mission that does not exist."""
        head = self.head(mission_id)
        return None if head is None else self.at(head)

    def at(self, oid: pygit2.Oid) -> Snapshot:
        known = self._snapshots.get(oid)
        if known is not None:
            return known
        commit = self.repo[oid]
        try:
            tree = commit.tree  # type: ignore[attr-defined]
            mission = mission_from_dict(read_json(tree[MISSION].data))
            links = read_json(tree[QUESTS].data)
            request = read_json(tree[REQUEST].data)
            revision = int(trailers(commit.message)["Ephyra-Revision"])  # type: ignore[attr-defined]
        except (KeyError, ValueError, TypeError) as exc:
            raise JournalError(f"{oid} is not a mission journal commit ({exc})") from None
        snapshot = Snapshot(oid, mission, links, request, revision)
        if len(self._snapshots) >= 4096:
            self._snapshots.clear()
        self._snapshots[oid] = snapshot
        return snapshot

    def commits(self, head: pygit2.Oid) -> Iterator[pygit2.Oid]:
        """The journal's commits from ``head`` back to the creation, newest first. A journal is
        linear; a merge commit means a hand edit, and repair stops rather than guess."""
        oid: pygit2.Oid | None = head
        while oid is not None:
            parents = self.repo[oid].parent_ids  # type: ignore[attr-defined]
            if len(parents) > 1:
                raise JournalError(f"{oid} has {len(parents)} parents: a journal is linear")
            yield oid
            oid = parents[0] if parents else None

    def history(self, mission_id: str) -> list[Snapshot]:
        """Every commit of the mission, newest first."""
        head = self.head(mission_id)
        return [] if head is None else [self.at(oid) for oid in self.commits(head)]

    def subjects_since(self, head: pygit2.Oid, seen: pygit2.Oid) -> set[str] | None:
        """The subjects (mission or work package ids) the commits after ``seen`` up to ``head``
        moved; None when ``seen`` is not in the mission's history at all."""
        moved: set[str] = set()
        for oid in self.commits(head):
            if oid == seen:
                return moved
            moved.add(trailers(self.repo[oid].message).get("Ephyra-Subject", ""))  # type: ignore[attr-defined]
        return None

    # --- writing ---------------------------------------------------------------------------

    def append(
        self,
        mission_id: str,
        expected: pygit2.Oid | None,
        *,
        mission: Mission,
        links: dict[str, str],
        request: dict[str, Any],
        move: Move,
        revision: int,
    ) -> pygit2.Oid:
        """Journal one accepted decision on top of ``expected`` (None: create the mission).
        Raises ``MissionConflict`` when the ref is not at ``expected`` as it is moved."""
        name = REF_PREFIX + mission_id
        ref = self.repo.references.get(name)
        if (None if ref is None else ref.target) != expected:
            raise MissionConflict(mission_id, "the ref moved" if ref else "it does not exist")
        write = self._write
        entries = {
            MISSION: (BLOB, write(pygit2.GIT_OBJECT_BLOB, pretty_json(mission_to_dict(mission)))),
            QUESTS: (BLOB, write(pygit2.GIT_OBJECT_BLOB, pretty_json(links))),
            REQUEST: (BLOB, write(pygit2.GIT_OBJECT_BLOB, pretty_json(request))),
        }
        tree = write(pygit2.GIT_OBJECT_TREE, tree_bytes(entries))
        at = datetime.fromisoformat(request["at"])
        offset = int(at.utcoffset().total_seconds()) // 60  # type: ignore[union-attr]
        message = commit_message(mission_id, move, request, revision, expected)
        commit = write(
            pygit2.GIT_OBJECT_COMMIT,
            commit_at(tree, expected, int(at.timestamp()), offset, message),
        )
        try:
            if ref is None:
                with self.repo.transaction() as txn:
                    txn.lock_ref(name)
                    if self.repo.references.get(name) is not None:  # read under the lock
                        raise MissionConflict(mission_id, "it already exists")
                    txn.set_target(name, commit)
            else:
                ref.set_target(commit)  # CAS against the value ref was read with
        except (pygit2.GitError, OSError, KeyError) as exc:
            reason = _lost_race(exc)
            if reason is None:
                raise
            raise MissionConflict(mission_id, reason) from None
        return commit


def _lost_race(exc: Exception) -> str | None:
    """Why libgit2 refused the ref update, when that means another writer was first (the words
    ``journal.store`` reads)."""
    if isinstance(exc, KeyError):
        return "the ref was deleted"
    text = str(exc)
    if "does not match" in text:
        return "the ref moved"
    if "failed to lock" in text or "failed to create locked file" in text:
        return "the ref is locked by another writer"
    return None


_journals = threading.local()


def mission_journal(workspace) -> MissionJournal:
    """The workspace's mission journal, one open repository per thread (pygit2 objects are not
    shared between threads)."""
    cache = _journals.__dict__.setdefault("by_path", {})
    journal = cache.get(workspace.repository)
    if journal is None:
        if len(cache) >= 64:  # a process serves a few workspaces; tests, many
            cache.clear()
        journal = cache[workspace.repository] = MissionJournal(Path(workspace.repository))
    return journal
