"""Journals travel with the repository: push to a bare remote, clone, fetch, and conflicts."""

from __future__ import annotations

import subprocess

import pytest

from journal.apply import apply
from journal.remote import PushRejected, fetch, push
from journal.store import Journal, JournalConflict
from tests.core.lifecycle_helpers import next_event
from tests.core.story import Story

QID = "checkout-500"
REF = f"refs/ephyra/quests/{QID}"


def git(*args: str, cwd=None) -> str:
    return subprocess.run(
        ["git", *args], capture_output=True, text=True, check=True, cwd=cwd
    ).stdout


def advance(journal: Journal, quest_id: str, steps: int, story: Story | None = None) -> Story:
    story = story or Story(quest_id)
    for _ in range(steps):
        quest = journal.load(quest_id)[0]
        assert apply(journal, next_event(story, quest)).decision.accepted
    return story


def comment(journal: Journal, story: Story, body: str):
    applied = apply(journal, story("comment_added", body=body))
    assert applied.decision.accepted
    return applied.head


@pytest.fixture
def remote(tmp_path):
    path = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(path))
    return path


@pytest.fixture
def local(tmp_path) -> Journal:
    return Journal.init(tmp_path / "local.git")


def test_pushed_journals_are_seen_by_a_mirror_clone(tmp_path, remote, local):
    advance(local, QID, 6)
    advance(local, "billing-7", 2)
    pushed = push(local, remote)
    assert sorted(pushed.created) == ["refs/ephyra/quests/billing-7", REF]

    git("clone", "-q", "--mirror", str(remote), str(tmp_path / "clone.git"))
    clone = Journal(tmp_path / "clone.git")
    assert clone.quest_ids() == ["billing-7", QID]
    assert clone.load(QID) == local.load(QID)
    assert [e.oid for e in clone.history(QID)] == [e.oid for e in local.history(QID)]

    assert push(local, remote) == ([], [], sorted(pushed.created))  # nothing new: up to date


def test_fetch_creates_and_fast_forwards_local_journals(tmp_path, remote, local):
    story = advance(local, QID, 3)
    push(local, remote)
    other = Journal.init(tmp_path / "other.git")
    assert fetch(other, remote).created == [QID]
    assert other.load(QID) == local.load(QID)

    comment(local, story, "more")
    push(local, remote)
    result = fetch(other, remote)
    assert result.fast_forwarded == [QID] and not result.diverged
    assert other.head(QID) == local.head(QID)
    assert fetch(other, remote).unchanged == [QID]
    tracking = f"refs/ephyra-remote/origin/quests/{QID}"
    assert other.repo.references[tracking].target == local.head(QID)


def test_a_concurrent_remote_update_makes_our_push_a_conflict_and_changes_nothing(
    tmp_path, remote, local
):
    story = advance(local, QID, 3)  # researching
    quiet = advance(local, "billing-7", 2)
    push(local, remote)
    git("clone", "-q", "--mirror", str(remote), str(tmp_path / "b.git"))
    writer_b = Journal(tmp_path / "b.git")

    b_story = Story(QID, start=story.at)
    b_story.n = 100  # B's own event ids: a quest takes each id once
    b_head = comment(writer_b, b_story, "B was first")  # B appends…
    push(writer_b, remote)  # …and pushes first

    comment(local, story, "A was second")  # A appends to the same quest
    comment(local, quiet, "unrelated")  # and to another quest that nobody else touched
    with pytest.raises(PushRejected) as caught:
        push(local, remote)
    rejected = caught.value
    assert isinstance(rejected, JournalConflict)
    assert rejected.refs == [REF] and REF in str(rejected)
    assert rejected.accepted == ["refs/ephyra/quests/billing-7"]  # per-ref, not atomic
    remote_head = git("--git-dir", str(remote), "rev-parse", REF).strip()
    assert remote_head == str(b_head)  # never overwritten

    ours = local.head(QID)
    result = fetch(local, remote)
    assert result.diverged == [QID] and result.unchanged == ["billing-7"]
    assert local.head(QID) == ours  # a diverged journal is reported, not moved


def test_a_journal_ahead_of_the_remote_is_reported_as_ahead(remote, local):
    story = advance(local, QID, 3)
    push(local, remote)
    comment(local, story, "not pushed yet")
    ahead = fetch(local, remote, name="backup")
    assert ahead.ahead == [QID]
    assert fetch(local, remote, fast_forward=False).ahead == [QID]


def test_pushing_an_empty_journal_does_nothing(remote, local):
    assert push(local, remote) == ([], [], [])
    assert git("--git-dir", str(remote), "for-each-ref").strip() == ""


def test_a_quest_can_be_pushed_alone(remote, local):
    advance(local, QID, 2)
    advance(local, "billing-7", 2)
    assert push(local, remote, quests=[QID]).created == [REF]
    refs = git("--git-dir", str(remote), "for-each-ref", "--format=%(refname)").split()
    assert refs == [REF]
