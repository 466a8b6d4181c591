"""The Git side of the audit anchor: the head of a workspace's audit chain, kept in Git.

The database holds the hash-chained audit log; a database owner could rebuild the whole chain
consistently and no hash inside it would tell. The anchor is the answer: every so often the
chain's head (sequence and hash) is committed on ``refs/ephyra/audit/<workspace>``, each anchor
the parent of the next, so the history of heads lives in the repository (and travels with its
pushes), outside the database's reach. ``ledger.audit`` decides when to anchor and checks the
log against the anchors; this module only reads and writes them (docs/audit.md).

The ref moves like a quest journal's (journal/store.py): compare-and-swap, never forced, and
never backwards: an anchor whose sequence is not above the current one is not written.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import pygit2

from journal.errors import JournalError
from journal.format import BLOB, commit_at, pretty_json, tree_bytes
from journal.store import loose_writer

AUDIT_REF_PREFIX = "refs/ephyra/audit/"
HEAD_FILE = "head.json"
SEQUENCE_TRAILER, HASH_TRAILER = "Ephyra-Audit-Sequence", "Ephyra-Audit-Hash"
_FIELDS = {"workspace": str, "sequence": int, "entry_hash": str, "at": str}
_KIND = {str: "a string", int: "an integer"}


class AnchorError(JournalError):
    """An anchor cannot be read or written as asked (malformed, or it contradicts the ref)."""


class AnchorConflict(AnchorError):
    """Another writer moved the anchor ref first; read it again and decide again."""


@dataclass(frozen=True)
class Anchor:
    """One anchored chain head: entry ``sequence`` of ``workspace`` had ``entry_hash``."""

    workspace: str
    sequence: int
    entry_hash: str
    at: str  # the entry's time, ISO 8601 in UTC, as hashed
    commit: str  # the anchor commit's oid


def _lost_race(exc: Exception) -> str | None:
    """Why libgit2 refused the ref update, when the refusal means another writer was first
    (the same words journal/store.py reads)."""
    if isinstance(exc, KeyError):
        return "the ref was deleted"
    text = str(exc)
    if "does not match" in text:
        return "the ref moved"
    if "failed to lock" in text or "failed to create locked file" in text:
        return "the ref is locked by another writer"
    return None


def anchor_ref(workspace: str) -> str:
    return AUDIT_REF_PREFIX + workspace


# Open repositories by path, one set per thread (pygit2 objects are not shared between
# threads): anchoring runs after every checkpoint decision, and opening a repository and
# building its object writer each time cost more than the anchor itself.
_opened = threading.local()
# Anchors already parsed, by commit and workspace: a commit never changes, so none goes stale.
_parsed: dict[tuple[pygit2.Oid, str], Anchor] = {}
_PARSED_LIMIT = 4096
_OPENED_LIMIT = 32

Writer = Callable[[int, bytes], pygit2.Oid]


def _open_writing(
    repo: str | os.PathLike[str] | pygit2.Repository,
) -> tuple[pygit2.Repository, Writer]:
    if isinstance(repo, pygit2.Repository):
        return repo, loose_writer(repo)
    cache = _opened.__dict__.setdefault("by_path", {})
    key = os.fspath(repo)
    known = cache.get(key)
    if known is None:
        try:
            opened = pygit2.Repository(key)
        except pygit2.GitError as exc:
            raise AnchorError(f"no Git repository at {repo}: {exc}") from None
        if len(cache) >= _OPENED_LIMIT:  # a process serves a few workspaces; tests, many
            cache.clear()
        known = cache[key] = (opened, loose_writer(opened))
    return known


def _open(repo: str | os.PathLike[str] | pygit2.Repository) -> pygit2.Repository:
    return repo if isinstance(repo, pygit2.Repository) else _open_writing(repo)[0]


def _parse(repo: pygit2.Repository, oid: pygit2.Oid, workspace: str) -> Anchor:
    known = _parsed.get((oid, workspace))
    if known is None:
        known = _parse_commit(repo, oid, workspace)
        if len(_parsed) >= _PARSED_LIMIT:
            _parsed.clear()
        _parsed[(oid, workspace)] = known
    return known


def _parse_commit(repo: pygit2.Repository, oid: pygit2.Oid, workspace: str) -> Anchor:
    commit = repo[oid]
    where = f"{anchor_ref(workspace)} at {oid}"
    if not isinstance(commit, pygit2.Commit):
        raise AnchorError(f"{where} is a {type(commit).__name__.lower()}, not an anchor commit")
    try:
        data = json.loads(commit.tree[HEAD_FILE].data)
    except KeyError:
        raise AnchorError(f"{where} has no {HEAD_FILE}: not an anchor commit") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise AnchorError(f"{where}: {HEAD_FILE} is not JSON ({exc})") from None
    if not isinstance(data, dict) or set(data) != set(_FIELDS):
        raise AnchorError(f"{where}: {HEAD_FILE} must hold exactly {sorted(_FIELDS)}")
    for name, kind in _FIELDS.items():
        # bool is an int to Python; a sequence of true is still malformed.
        if type(data[name]) is not kind:
            raise AnchorError(f"{where}: {HEAD_FILE} field {name!r} must be {_KIND[kind]}")
    if data["workspace"] != workspace:
        raise AnchorError(f"{where} anchors workspace {data['workspace']!r}, not {workspace!r}")
    if data["sequence"] < 1:
        raise AnchorError(f"{where}: sequence {data['sequence']} is not an entry")
    return Anchor(workspace, data["sequence"], data["entry_hash"], data["at"], str(oid))


def read_anchor(repo: str | os.PathLike[str] | pygit2.Repository, workspace: str) -> Anchor | None:
    """The latest anchor of ``workspace``, or None when it was never anchored."""
    repo = _open(repo)
    ref = repo.references.get(anchor_ref(workspace))
    return None if ref is None else _parse(repo, ref.target, workspace)


def anchor_history(
    repo: str | os.PathLike[str] | pygit2.Repository, workspace: str
) -> list[Anchor]:
    """Every anchor of ``workspace``, oldest first. Raises ``AnchorError`` if the history is not
    a line of anchors whose sequences rise: that ref was written by hand."""
    repo = _open(repo)
    ref = repo.references.get(anchor_ref(workspace))
    anchors: list[Anchor] = []
    oid = None if ref is None else ref.target
    while oid is not None:
        anchor = _parse(repo, oid, workspace)
        parents = repo[oid].parent_ids
        if len(parents) > 1:
            raise AnchorError(f"anchor {oid} has {len(parents)} parents: anchors form a line")
        if anchors and anchor.sequence >= anchors[-1].sequence:
            raise AnchorError(
                f"anchor {anchors[-1].commit} (entry #{anchors[-1].sequence}) follows anchor "
                f"{oid} (entry #{anchor.sequence}): anchors only move forward"
            )
        anchors.append(anchor)
        oid = parents[0] if parents else None
    anchors.reverse()
    return anchors


def anchor_message(workspace: str, sequence: int, entry_hash: str, at: str, action: str) -> str:
    what = f" ({action})" if action else ""
    return (
        f"audit {workspace}: anchored at entry #{sequence}{what}\n\n"
        f"Entry #{sequence} of the audit log of workspace {workspace}, recorded at {at},\n"
        f"has hash {entry_hash}; every entry before it is chained into that hash.\n"
        f"Check the database against it: python manage.py audit verify --workspace {workspace}\n\n"
        f"Ephyra-Audit-Workspace: {workspace}\n"
        f"{SEQUENCE_TRAILER}: {sequence}\n"
        f"{HASH_TRAILER}: {entry_hash}\n"
    )


def write_anchor(
    repo: str | os.PathLike[str] | pygit2.Repository,
    workspace: str,
    *,
    sequence: int,
    entry_hash: str,
    at: str,
    when: datetime,
    action: str = "",
) -> Anchor | None:
    """Anchor entry ``sequence`` on top of the current anchor; None when the current anchor
    already covers it (an anchor never moves backwards).

    ``when`` is the commit's time (the moment of anchoring; ``at`` is the entry's). Raises
    ``AnchorConflict`` when another writer moved the ref between the read and the write, and
    ``AnchorError`` when the ref already anchors this sequence with a different hash: that is
    a rebuilt log, and writing over it would hide the evidence."""
    if sequence < 1:
        raise AnchorError(f"sequence {sequence} is not an entry")
    if when.utcoffset() is None:
        raise AnchorError("the anchoring time must carry a time zone")
    repo, write = _open_writing(repo)
    name = anchor_ref(workspace)
    ref = repo.references.get(name)
    current = None if ref is None else _parse(repo, ref.target, workspace)
    if current is not None and sequence <= current.sequence:
        if sequence == current.sequence and entry_hash != current.entry_hash:
            raise AnchorError(
                f"{name} anchors entry #{sequence} with hash {current.entry_hash}, "
                f"not {entry_hash}: the audit log was rebuilt after it was anchored"
            )
        return None
    head = {"workspace": workspace, "sequence": sequence, "entry_hash": entry_hash, "at": at}
    # Written as bytes, as the journal writes its commits (journal/store.py says why).
    tree = write(
        pygit2.GIT_OBJECT_TREE,
        tree_bytes({HEAD_FILE: (BLOB, write(pygit2.GIT_OBJECT_BLOB, pretty_json(head)))}),
    )
    offset = int(when.utcoffset().total_seconds()) // 60  # type: ignore[union-attr]
    message = anchor_message(workspace, sequence, entry_hash, at, action)
    parent = None if ref is None else ref.target
    commit = write(
        pygit2.GIT_OBJECT_COMMIT, commit_at(tree, parent, int(when.timestamp()), offset, message)
    )
    try:
        if ref is None:
            with repo.transaction() as txn:
                txn.lock_ref(name)
                # Read under the lock: references.create(force=False) checks before locking.
                if repo.references.get(name) is not None:
                    raise AnchorConflict(f"{name} was created by another writer")
                txn.set_target(name, commit)
        else:
            ref.set_target(commit)  # CAS against the value ref was read with
    except (pygit2.GitError, OSError, KeyError) as exc:
        reason = _lost_race(exc)
        if reason is None:
            raise AnchorError(f"cannot move {name}: {exc}") from exc
        raise AnchorConflict(f"{name}: {reason}") from None
    return Anchor(workspace, sequence, entry_hash, at, str(commit))
