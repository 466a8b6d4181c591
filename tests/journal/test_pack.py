"""A group's objects as one pack: a pack git itself verifies, refs moved only after it is on
disk, a ref moved by another writer meanwhile decided again, and packs merged once many."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2
import pytest

from ephyra.core.rules import DEFAULT_POLICY
from journal import pack
from journal.apply import apply, apply_all, replay_journal
from journal.pack import PackWriter, pack_count
from journal.store import Journal
from tests.core.lifecycle_helpers import next_event
from tests.core.story import Story


def git(repo: Journal, *args: str) -> str:
    done = subprocess.run(
        ["git", "--git-dir", repo.path, *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def loose(journal: Journal) -> int:
    objects = Path(journal.path) / "objects"
    return sum(1 for d in objects.iterdir() if len(d.name) == 2 for _ in d.iterdir())


@pytest.fixture
def journal(tmp_path) -> Journal:
    return Journal.init(tmp_path / "mirror.git")


def firsts(quests: int, start: int = 0) -> list:
    return [Story(f"q{n}").signal(fingerprint=f"fp{n}") for n in range(start, start + quests)]


def test_a_written_pack_is_one_git_verifies_and_reads(journal, tmp_path):
    writer = PackWriter(os.path.join(journal.path, "objects"))
    contents = [b"", b"x" * 5000, "ünï ✓\n".encode(), bytes(range(256)) * 40]
    blobs = [writer.add(pygit2.GIT_OBJECT_BLOB, data) for data in contents]
    assert blobs == [pygit2.hash(data) for data in contents]
    entries = b"".join(b"100644 f%d\0%s" % (i, b.raw) for i, b in enumerate(blobs))
    tree = writer.add(pygit2.GIT_OBJECT_TREE, entries)
    path = writer.write()
    assert path is not None and path.endswith(".pack") and len(writer) == 0
    verified = git(journal, "verify-pack", "-v", path[: -len(".pack")] + ".idx")
    assert f"{tree} tree" in verified
    assert git(journal, "cat-file", "-p", f"{blobs[1]}") == "x" * 5000
    assert journal.repo[blobs[2]].data == contents[2]
    git(journal, "fsck", "--strict", "--no-dangling")
    assert writer.write() is None  # nothing added since: nothing written


def test_a_group_writes_one_pack_and_no_loose_object(journal):
    before = loose(journal)
    answers = apply_all(journal, firsts(5))
    assert [a.decision.accepted for a in answers] == [True] * 5
    assert loose(journal) == before and pack_count(os.path.join(journal.path, "objects")) == 1
    for n, answer in enumerate(answers):
        assert journal.head(f"q{n}") == answer.head and answer.parent is None
        assert replay_journal(journal, f"q{n}").matches
    log = git(journal, "log", "--format=%s", "refs/ephyra/quests/q3")
    assert log.startswith("q3: new quest → sensed")
    git(journal, "fsck", "--strict", "--no-dangling")


def test_a_group_writes_the_commits_loose_appends_would(journal, tmp_path):
    other = Journal.init(tmp_path / "other.git")
    grouped = apply_all(journal, firsts(3))
    alone = [apply(other, event) for event in firsts(3)]
    assert [a.head for a in grouped] == [a.head for a in alone]


def test_a_ref_moved_by_another_writer_before_publishing_is_decided_again(journal, monkeypatch):
    apply_all(journal, firsts(2))
    stories = {f"q{n}": Story(f"q{n}") for n in range(2)}
    for story in stories.values():
        story.n = 1
    rival = Journal(journal.path)
    real_publish = Journal.publish
    rivalled = []

    def late(self, quest_id, expected, commit):
        if quest_id == "q1" and self is journal and not rivalled:
            # the rival moves q1 between the group's staging and its publishing
            rivalled.append(quest_id)
            event = stories["q1"]("comment_added", body="the rival was first")
            assert apply(rival, event).decision.accepted
        return real_publish(self, quest_id, expected, commit)

    monkeypatch.setattr(Journal, "publish", late)
    quest = journal.load("q0")[0]
    triage = [next_event(stories["q0"], quest), next_event(stories["q1"], journal.load("q1")[0])]
    answers = apply_all(journal, triage)
    assert [a.decision.accepted for a in answers] == [True, True]
    assert answers[1].retries == 0 and answers[1].parent != answers[0].parent
    history = [entry.event.type for entry in journal.history("q1")]
    assert history == ["signal_sensed", "comment_added", "triage_decided"]
    assert replay_journal(journal, "q1", DEFAULT_POLICY).matches


def test_a_group_that_fails_before_its_pack_is_written_leaves_nothing(journal, monkeypatch):
    events = firsts(3)
    real_stage = Journal.stage

    def failing(self, quest_id, *args):
        if quest_id == "q2":
            raise RuntimeError("the process fails while staging")
        return real_stage(self, quest_id, *args)

    monkeypatch.setattr(Journal, "stage", failing)
    with pytest.raises(RuntimeError):
        apply_all(journal, events)
    assert journal.heads() == {}
    assert pack_count(os.path.join(journal.path, "objects")) == 0


def test_many_packs_are_merged_and_every_journal_still_reads(journal, monkeypatch):
    monkeypatch.setattr(pack, "PACK_LIMIT", 4)
    objects = os.path.join(journal.path, "objects")
    reader = Journal(journal.path)  # another instance, reading while the packs change
    heads = {}
    for round_ in range(6):
        for answer in apply_all(journal, firsts(3, start=3 * round_)):
            heads[answer.decision.quest_id] = answer.head
        journal.consolidate()  # as the engine does after its Git writes
        assert all(reader.load(q)[0] is not None for q in heads)
        assert pack_count(objects) <= 4 + 1
    assert pack_count(objects) < 6
    fresh = Journal(journal.path)
    assert {q: fresh.head(q) for q in heads} == heads
    for quest_id in heads:
        assert replay_journal(fresh, quest_id).matches
    git(journal, "fsck", "--strict", "--no-dangling")


def test_loose_objects_are_packed_once_there_are_many(journal, monkeypatch):
    monkeypatch.setattr(pack, "LOOSE_LIMIT", 256)  # one object in objects/17 is enough
    stories = [Story(f"q{n}") for n in range(40)]
    heads = {s.quest: apply(journal, s.signal(fingerprint=s.quest)).head for s in stories}
    objects = os.path.join(journal.path, "objects")
    assert pack.loose_estimate(objects) >= 256 and loose(journal) >= 200
    assert journal.consolidate()
    assert loose(journal) == 0 and pack_count(objects) == 1
    assert not journal.consolidate()  # nothing left to do
    fresh = Journal(journal.path)
    assert {q: fresh.head(q) for q in heads} == heads
    assert all(replay_journal(fresh, q).matches for q in heads)
