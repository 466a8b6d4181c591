"""The Git side of the audit anchor (journal/anchor.py): real repositories and git, no database."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pygit2
import pytest

from journal.anchor import (
    AnchorConflict,
    AnchorError,
    anchor_history,
    anchor_ref,
    read_anchor,
    write_anchor,
)

WHEN = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
REF = "refs/ephyra/audit/shop"


def h(n: int) -> str:
    return f"sha256:{n:064x}"


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["git", "--git-dir", str(repo), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def anchor(repo, sequence: int, **kw):
    fields = {"entry_hash": h(sequence), "at": f"2026-12-01T10:{sequence % 60:02d}:00+00:00"}
    return write_anchor(repo, "shop", sequence=sequence, when=WHEN, **(fields | kw))


@pytest.fixture
def repo(tmp_path) -> Path:
    path = tmp_path / "mirror.git"
    pygit2.init_repository(str(path), bare=True)
    return path


def test_an_anchor_is_a_commit_holding_head_json_readable_with_plain_git(repo):
    first = anchor(repo, 5, action="quest.checkpoint_decided")
    second = anchor(repo, 12)
    assert anchor_ref("shop") == REF
    assert json.loads(git(repo, "show", f"{REF}:head.json")) == {
        "workspace": "shop",
        "sequence": 12,
        "entry_hash": h(12),
        "at": "2026-12-01T10:12:00+00:00",
    }
    assert git(repo, "log", "--format=%s", REF).splitlines() == [
        "audit shop: anchored at entry #12",
        "audit shop: anchored at entry #5 (quest.checkpoint_decided)",
    ]
    trailers = git(repo, "log", "--format=%(trailers:key=Ephyra-Audit-Sequence,valueonly)%x00", REF)
    assert [t.strip() for t in trailers.split("\0") if t.strip()] == ["12", "5"]
    hashes = git(repo, "log", "-1", "--format=%(trailers:key=Ephyra-Audit-Hash,valueonly)", REF)
    assert hashes.strip() == h(12)
    assert git(repo, "rev-parse", f"{REF}^").strip() == first.commit  # parent = previous anchor
    assert read_anchor(repo, "shop") == second
    assert [a.sequence for a in anchor_history(repo, "shop")] == [5, 12]


def test_an_anchor_that_would_move_backwards_is_not_written(repo):
    anchor(repo, 10)
    head = git(repo, "rev-parse", REF)
    assert anchor(repo, 9) is None
    assert anchor(repo, 10) is None  # the same head again: already anchored
    assert git(repo, "rev-parse", REF) == head


def test_the_same_sequence_with_another_hash_is_refused_as_a_rebuilt_log(repo):
    anchor(repo, 10)
    with pytest.raises(AnchorError) as refused:
        anchor(repo, 10, entry_hash=h(99))
    assert str(refused.value) == (
        f"{REF} anchors entry #10 with hash {h(10)}, not {h(99)}: "
        "the audit log was rebuilt after it was anchored"
    )


def test_a_writer_that_finds_the_ref_locked_loses_and_moves_nothing(repo):
    anchor(repo, 1)
    head = git(repo, "rev-parse", REF)
    lock = repo / "refs" / "ephyra" / "audit" / "shop.lock"  # what git holds while it writes
    lock.write_text("")
    with pytest.raises(AnchorConflict, match="the ref is locked by another writer"):
        anchor(repo, 2)
    lock.unlink()
    assert git(repo, "rev-parse", REF) == head
    assert anchor(repo, 2).sequence == 2


def test_creating_the_ref_under_a_held_lock_also_loses(repo):
    (repo / "refs" / "ephyra" / "audit").mkdir(parents=True)
    (repo / "refs" / "ephyra" / "audit" / "shop.lock").write_text("")
    with pytest.raises(AnchorConflict, match="locked by another writer"):
        anchor(repo, 1)
    assert read_anchor(repo, "shop") is None


def test_two_writers_racing_never_move_the_ref_backwards(repo):
    """Each writer anchors its own rising sequences from its own repository handle; a watcher
    reads the ref all along. Whoever wins, the ref only ever moves forward."""
    top = 60
    stop = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def writer(sequences):
        handle = pygit2.Repository(str(repo))
        try:
            for sequence in sequences:
                while True:
                    try:
                        anchor(handle, sequence)
                        break
                    except AnchorConflict:
                        continue  # lost the race: read again and decide again
        except BaseException as exc:  # surfaced below, not swallowed
            errors.append(exc)

    def watcher():
        handle = pygit2.Repository(str(repo))
        while not stop.is_set():
            current = read_anchor(handle, "shop")
            if current is not None:
                seen.append(current.sequence)

    threads = [
        threading.Thread(target=writer, args=(range(1, top + 1, 2),)),
        threading.Thread(target=writer, args=(range(2, top + 1, 2),)),
    ]
    watching = threading.Thread(target=watcher)
    watching.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    watching.join()
    assert errors == []
    history = [a.sequence for a in anchor_history(repo, "shop")]  # raises if not rising
    assert history == sorted(set(history)) and history[-1] == top
    assert seen == sorted(seen)  # never observed going back


def test_reading_without_a_repository_says_where_it_looked(tmp_path):
    with pytest.raises(AnchorError, match=r"^no Git repository at .*nowhere\.git"):
        read_anchor(tmp_path / "nowhere.git", "shop")


def test_an_unanchored_workspace_has_no_anchor(repo):
    assert read_anchor(repo, "shop") is None
    assert anchor_history(repo, "shop") == []


def _hand_written(repo: Path, files: dict[str, str], parent: str | None = None) -> str:
    """A commit on the anchor ref made with plain git, as someone editing by hand would."""
    entries = "".join(
        f"100644 blob {git(repo, 'hash-object', '-w', '--stdin', stdin=text).strip()}\t{name}\n"
        for name, text in files.items()
    )
    tree = git(repo, "mktree", stdin=entries).strip()
    args = ["commit-tree", tree, "-m", "by hand"] + (["-p", parent] if parent else [])
    commit = subprocess.run(
        ["git", "--git-dir", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ
        | {"GIT_AUTHOR_NAME": "m", "GIT_AUTHOR_EMAIL": "m@x"}
        | {"GIT_COMMITTER_NAME": "m", "GIT_COMMITTER_EMAIL": "m@x"},
    ).stdout.strip()
    git(repo, "update-ref", REF, commit)
    return commit


def _head(**fields) -> str:
    data = {"workspace": "shop", "sequence": 3, "entry_hash": h(3), "at": "2026"} | fields
    return json.dumps({k: v for k, v in data.items() if v is not None})


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"notes.txt": "hi"}, "has no head.json: not an anchor commit"),
        ({"head.json": "{not json"}, "head.json is not JSON"),
        (
            {"head.json": _head(at=None)},
            "head.json must hold exactly ['at', 'entry_hash', 'sequence', 'workspace']",
        ),
        ({"head.json": _head(sequence="3")}, "head.json field 'sequence' must be an integer"),
        ({"head.json": _head(sequence=True)}, "head.json field 'sequence' must be an integer"),
        ({"head.json": _head(sequence=0)}, "sequence 0 is not an entry"),
        ({"head.json": _head(workspace="other")}, "anchors workspace 'other', not 'shop'"),
    ],
)
def test_a_hand_written_anchor_is_refused_with_what_is_wrong(repo, files, message):
    commit = _hand_written(repo, files)
    with pytest.raises(AnchorError) as refused:
        read_anchor(repo, "shop")
    assert str(refused.value).startswith(f"{REF} at {commit}")
    assert message in str(refused.value)


def test_a_forged_history_that_goes_backwards_is_refused(repo):
    later = _hand_written(repo, {"head.json": _head(sequence=9, entry_hash=h(9))})
    forged = _hand_written(repo, {"head.json": _head(sequence=4, entry_hash=h(4))}, later)
    with pytest.raises(AnchorError) as refused:
        anchor_history(repo, "shop")
    assert str(refused.value) == (
        f"anchor {forged} (entry #4) follows anchor {later} (entry #9): anchors only move forward"
    )


def test_a_ref_pointing_at_a_blob_is_not_an_anchor(repo):
    blob = git(repo, "hash-object", "-w", "--stdin", stdin="x").strip()
    git(repo, "update-ref", REF, blob)
    with pytest.raises(AnchorError, match="is a blob, not an anchor commit"):
        read_anchor(repo, "shop")


def test_bad_arguments_are_refused(repo):
    with pytest.raises(AnchorError, match="sequence 0 is not an entry"):
        anchor(repo, 0)
    with pytest.raises(AnchorError, match="must carry a time zone"):
        write_anchor(repo, "shop", sequence=1, entry_hash=h(1), at="x", when=datetime(2026, 1, 1))


def test_the_commit_time_is_the_moment_of_anchoring(repo):
    when = WHEN + timedelta(hours=3)
    written = write_anchor(repo, "shop", sequence=1, entry_hash=h(1), at="a", when=when)
    assert git(repo, "log", "-1", "--format=%cI", written.commit).strip() == when.isoformat()
