"""The journal's on-disk format: ref names, file paths, JSON layout, commit message, author.

Everything here is what a person reading the journal with plain ``git`` sees, documented in
``docs/journal.md``; ``journal.store`` writes it and reads it back.
"""

from __future__ import annotations

import hashlib
import json
import math
from json.encoder import encode_basestring
from typing import Any, NamedTuple

import orjson
import pygit2

from ephyra.core.effects import Effect, EffectType
from ephyra.core.events import BaseEvent
from ephyra.core.machine import ACCEPTED, MACHINE_VERSION, Decision
from ephyra.core.quest import Quest
from ephyra.core.states import State

REF_PREFIX = "refs/ephyra/quests/"
AUTHOR_NAME, AUTHOR_EMAIL = "Ephyra", "ephyra@localhost"

BLOB = pygit2.GIT_FILEMODE_BLOB
TREE = pygit2.GIT_FILEMODE_TREE

QUEST, EVENT, EFFECTS = "quest.json", "event.json", "effects.json"
SIGNAL, HYPOTHESIS, PLAN = "signal.json", "hypothesis.md", "plan.md"
PROOF_DIR, PROOF_FILE, DECISIONS_DIR = "proof", "bundle.json", "decisions"
# Journals written before the decision moved into the trailers carry it in this file.
LEGACY_DECISION = "decision.json"
# The index of used event ids (docs/journal.md, "Event ids"): sixteen files ids/0 … ids/f, written
# once every INDEX_EVERY commits, listing every event journaled before the commit that wrote them.
IDS_DIR = "ids"
INDEX_EVERY = 64
EMPTY_EFFECTS = b"[]\n"


def hex_or_none(oid: pygit2.Oid | None) -> str:
    return "none" if oid is None else str(oid)


# The journal's JSON: UTF-8, keys sorted at every level, one top-level field per line (and one
# element per line for a top-level list, and for a list held by a top-level field), deeper values
# in compact JSON with ", " and ": ". ``git diff`` then shows one changed field per line, and the
# C encoder does almost all the work: ``json.dumps(indent=2)`` runs the pure-Python encoder and
# costs ~4x more on the append path.
_compact = json.JSONEncoder(
    sort_keys=True, ensure_ascii=False, separators=(", ", ": "), allow_nan=False
).encode


def _field(value: Any, indent: str) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return encode_basestring(value)
    kind = type(value)
    if kind is int:  # the encoder would say the same, after building itself for one number
        return int.__repr__(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is list and value:
        inner = ",\n".join([f"{indent}  {_compact(item)}" for item in value])
        return f"[\n{inner}\n{indent}]"
    return _compact(value)


def read_json(data: bytes) -> Any:
    """A journal JSON file read back: what ``json.loads`` gives, through orjson when it reads
    the file the same way (about three times faster; repair reads every journal). orjson
    refuses what it would read differently (NaN, lone surrogates, 1e400), except an integer
    past 64 bits, which it reads as a float: a file with a digit run that long (20 digits, or
    19 after a minus; a string's digits count too, harmlessly) goes to ``json``."""
    digits = data.translate(_DIGITS_AS_ZERO)
    if _WIDE not in digits and _WIDE_NEGATIVE not in digits:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= i <= 0x39 else i for i in range(256))
_WIDE, _WIDE_NEGATIVE = b"0" * 20, b"-" + b"0" * 19


def pretty_json(value: Any) -> bytes:
    """The bytes of a journal JSON file (see above); ``json.loads`` gives ``value`` back."""
    if type(value) is dict and value:
        body = ",\n".join([f"{_key(k)}{_field(value[k], '  ')}" for k in sorted(value)])
        return f"{{\n{body}\n}}\n".encode()
    return (_field(value, "") + "\n").encode()


_KEYS: dict[str, str] = {}


def _key(name: str) -> str:
    prefix = _KEYS.get(name)
    if prefix is None:
        prefix = _KEYS[name] = f"  {encode_basestring(name)}: "
    return prefix


def id_bucket(event_id: str) -> str:
    """The file of ``ids/`` that lists ``event_id``: the first hex digit of the SHA-1 of the id
    (``printf %s <id> | sha1sum | cut -c1``), so the sixteen files share the ids evenly."""
    return hashlib.sha1(event_id.encode()).hexdigest()[0]


def index_file(rows: dict[str, tuple[str, str]]) -> bytes:
    """An ``ids/`` file: ``<event id> <event type> <commit>`` a line, sorted by event id.
    ``rows`` maps each event id to its (event type, commit hex)."""
    return "".join(
        [f"{key} {etype} {commit}\n" for key, (etype, commit) in sorted(rows.items())]
    ).encode()


def read_index_file(data: bytes) -> dict[str, tuple[str, str]]:
    """An ``ids/`` file read back (``index_file``); ValueError for a line that is not one."""
    rows: dict[str, tuple[str, str]] = {}
    for line in data.decode().splitlines():
        key, etype, commit = line.split(" ")
        rows[key] = (etype, commit)
    return rows


def text_file(text: str) -> bytes:
    return (text if text.endswith("\n") else text + "\n").encode()


def _when(event: BaseEvent) -> tuple[int, int]:
    # The event's time, not the clock: the same event on the same parent is the same commit.
    at = event.at
    return math.floor(at.timestamp()), int(at.utcoffset().total_seconds()) // 60  # type: ignore[union-attr]


def signature(event: BaseEvent) -> pygit2.Signature:
    return pygit2.Signature(AUTHOR_NAME, AUTHOR_EMAIL, *_when(event))


def tree_bytes(entries: dict[str, tuple[int, pygit2.Oid]]) -> bytes:
    """The content of a tree object holding ``entries`` (name -> (filemode, oid)), in git's
    order: by name, a subtree compared as if its name ended in ``/``."""
    names = sorted(entries, key=lambda name: name + "/" if entries[name][0] == TREE else name)
    return b"".join([b"%o %s\0%s" % (entries[n][0], n.encode(), entries[n][1].raw) for n in names])


def commit_bytes(
    tree: pygit2.Oid, parent: pygit2.Oid | None, event: BaseEvent, message: str
) -> bytes:
    """The content of the journal commit libgit2's ``create_commit`` would write for these
    (author and committer both Ephyra at the event's time); a test holds the two equal."""
    return commit_at(tree, parent, *_when(event), message)


def commit_at(
    tree: pygit2.Oid, parent: pygit2.Oid | None, time: int, offset: int, message: str
) -> bytes:
    """A commit by Ephyra (author and committer) at ``time`` (seconds since the epoch) with
    ``offset`` (minutes east of UTC)."""
    sign = "-" if offset < 0 else "+"
    offset = abs(offset)
    who = f"{AUTHOR_NAME} <{AUTHOR_EMAIL}> {time} {sign}{offset // 60:02d}{offset % 60:02d}"
    parents = "" if parent is None else f"parent {parent}\n"
    return f"tree {tree}\n{parents}author {who}\ncommitter {who}\n\n{message}".encode()


def _one_line(text: str) -> str:
    return " ".join(text.split())  # an actor cannot forge lines (or trailers) in the message


def commit_message(decision: Decision, event: BaseEvent, previous: pygit2.Oid | None) -> str:
    before, after = decision.state_before, decision.state
    if before is None:
        move = f"new quest → {after}"
    elif before != after:
        move = f"{before} → {after}"
    else:
        move = str(after)
    effects = "".join(f"\n- {e.key}" for e in decision.effects) or " none."
    return (
        f"{decision.quest_id}: {move} ({decision.event_type} {decision.event_id})\n\n"
        f"Revision {decision.revision}, by {_one_line(event.actor)} at {event.at.isoformat()}.\n"
        f"Effects:{effects}\n\n"
        f"Ephyra-Quest: {decision.quest_id}\n"
        f"Ephyra-Event-Type: {decision.event_type}\n"
        f"Ephyra-Event: {decision.event_id}\n"
        f"Ephyra-Previous-State: {'none' if before is None else before}\n"
        f"Ephyra-State: {after}\n"
        f"Ephyra-Revision: {decision.revision}\n"
        f"Ephyra-Machine-Version: {MACHINE_VERSION}\n"
        f"Ephyra-Previous-Head: {hex_or_none(previous)}\n"
    )


def trailers(message: str) -> dict[str, str]:
    """The ``Key: value`` lines of a commit message's last paragraph."""
    last = message.rstrip("\n").rsplit("\n\n", 1)[-1]
    return dict(line.split(": ", 1) for line in last.splitlines() if ": " in line)


def recorded_decision(message: str, effects: list[dict[str, Any]]) -> dict[str, Any]:
    """The decision a journal commit records, as ``Decision.to_dict()`` shows it: the
    trailers say who moved where, ``effects.json`` what was asked for. Raises KeyError or
    ValueError for a message without the trailers."""
    fields = trailers(message)
    before = fields["Ephyra-Previous-State"]
    return {
        "quest": fields["Ephyra-Quest"],
        "event": fields["Ephyra-Event"],
        "type": fields["Ephyra-Event-Type"],
        "outcome": ACCEPTED,  # only accepted transitions are journaled
        "from": None if before == "none" else before,
        "state": fields["Ephyra-State"],
        "revision": int(fields["Ephyra-Revision"]),
        "effects": [effect["key"] for effect in effects],
        "reason": None,
    }


class Entry(NamedTuple):
    """One journaled transition, read back from its commit."""

    oid: pygit2.Oid
    event: BaseEvent
    decision: dict[str, Any]  # Decision.to_dict(), from the trailers and effects.json
    quest: Quest
    effects: list[dict[str, Any]]  # effects.json: [{key, type, payload}]

    def to_decision(self) -> Decision:
        """The Decision this commit records, rebuilt with its quest and effect payloads."""
        d = self.decision
        effects = tuple(Effect(e["key"], EffectType(e["type"]), e["payload"]) for e in self.effects)
        return Decision(
            self.quest,
            d["quest"],
            d["event"],
            d["type"],
            d["outcome"],
            None if d["from"] is None else State(d["from"]),
            None if d["state"] is None else State(d["state"]),
            d["revision"],
            effects,
            d["reason"],
        )
