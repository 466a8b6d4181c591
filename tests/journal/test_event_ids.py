"""A quest's journal takes each event id once (issue 13, defect 3), found through the ids/
index without reading the history (docs/journal.md, "Event ids"). The machine's side is
tests/core/test_event_ids.py."""

from __future__ import annotations

import hashlib
import subprocess

import pygit2
import pytest

from ephyra.core.events import BaseEvent, event_to_dict, parse_event
from ephyra.core.machine import decide
from journal.apply import apply, apply_all, first_mismatch, replay_journal
from journal.format import INDEX_EVERY, commit_message, pretty_json, signature
from journal.store import Journal
from tests.core.lifecycle_helpers import NEW_HEAD, next_event
from tests.core.story import Story

QID = "checkout-500"
REF = f"refs/ephyra/quests/{QID}"


def git(journal: Journal, *args: str) -> str:
    done = subprocess.run(
        ["git", "--git-dir", journal.path, *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def as_id(event: BaseEvent, event_id: str, **changes) -> BaseEvent:
    return parse_event(event_to_dict(event) | {"id": event_id, **changes})


def main_line(journal: Journal, story: Story, steps: int) -> list[BaseEvent]:
    events, quest = [], None
    for _ in range(steps):
        event = next_event(story, quest)
        applied = apply(journal, event)
        assert applied.decision.accepted, applied.decision.reason
        events.append(event)
        quest = applied.decision.quest
    return events


def receipts(journal: Journal, story: Story, count: int) -> list[BaseEvent]:
    """``count`` usage receipts, each accepted (usage is taken in every state)."""
    events = [story("usage_recorded", source="runner", tokens=n + 1) for n in range(count)]
    for event in events:
        assert apply(journal, event).decision.accepted
    return events


@pytest.fixture
def journal(tmp_path) -> Journal:
    return Journal.init(tmp_path / "mirror.git")


def test_another_event_under_a_used_id_is_refused_naming_the_commit_and_nothing_is_written(
    journal,
):
    story = Story(QID)
    main_line(journal, story, 3)
    comment = story("comment_added", body="first")
    written = apply(journal, comment).head
    receipts(journal, story, 2)
    quest, head = journal.load(QID)
    reused = apply(journal, as_id(story("usage_recorded", source="runner", tokens=9), comment.id))
    assert reused.decision.outcome == "refused"
    assert reused.decision.reason == (
        f"the event id {comment.id} is already used by comment_added (commit {written}): "
        "a quest takes each event id once"
    )
    assert (reused.head, reused.duplicate) == (head, False)
    assert journal.load(QID) == (quest, head)
    assert quest.usage.tokens == 3


def test_another_event_under_the_heads_id_is_refused_not_answered_as_a_duplicate(journal):
    story = Story(QID)
    main_line(journal, story, 8)  # … patch_recorded: proving, asks for run_proof
    patch = journal.entry(journal.head(QID)).event
    failed = apply(journal, story("proof_failed", reason="red"))
    assert failed.decision.accepted  # back to patching: a new patch is expected
    other_head = as_id(patch, patch.id, head=NEW_HEAD)
    refused = apply(journal, other_head)
    assert refused.decision.outcome == "refused" and not refused.duplicate
    assert "already used by patch_recorded" in refused.decision.reason
    keys = [e["key"] for entry in journal.history(QID) for e in entry.effects]
    assert len(keys) == len(set(keys))  # no second run_proof under the same key


def test_an_exact_redelivery_of_an_older_event_is_answered_with_its_recorded_decision(journal):
    story = Story(QID)
    main_line(journal, story, 3)
    receipt = story("usage_recorded", source="runner", tokens=100)
    first = apply(journal, receipt)
    receipts(journal, story, 3)
    head = journal.head(QID)
    again = apply(journal, receipt)
    assert again.duplicate and again.decision.accepted
    assert again.decision.to_dict() == first.decision.to_dict()
    assert again.head == head  # the quest's head, not moved
    assert journal.load(QID)[0].usage.tokens == 106  # 100 once, then 1 + 2 + 3


def test_ids_are_found_in_the_index_once_a_quest_has_more_events_than_it_holds_unlisted(
    journal, tmp_path
):
    story = Story(QID)
    events = main_line(journal, story, 3) + receipts(journal, story, INDEX_EVERY + 10)
    files = git(journal, "ls-tree", "--name-only", f"{REF}:ids").split()
    assert files and set(files) <= set("0123456789abcdef")
    # docs/journal.md: the file is the first hex digit of the id's SHA-1; a line names the
    # event's type and commit.
    early = events[1]
    bucket = hashlib.sha1(early.id.encode()).hexdigest()[0]
    lines = git(journal, "show", f"{REF}:ids/{bucket}").splitlines()
    commit = journal.history(QID)[1].oid
    assert f"{early.id} triage_decided {commit}" in lines
    assert lines == sorted(lines)

    fresh = Journal(journal.path)  # nothing remembered: reads the index from Git
    refused = apply(fresh, as_id(story("comment_added", body="x"), early.id))
    assert refused.decision.reason == (
        f"the event id {early.id} is already used by triage_decided (commit {commit}): "
        "a quest takes each event id once"
    )
    assert apply(Journal(journal.path), events[5]).duplicate  # listed in the index
    assert apply(Journal(journal.path), events[-1]).duplicate  # not listed yet: the head
    assert apply(Journal(journal.path), events[-3]).duplicate  # not listed yet: a parent
    assert replay_journal(journal, QID).matches


def test_an_index_is_written_once_every_so_many_commits_not_on_every_append(journal):
    story = Story(QID)
    main_line(journal, story, 3)
    receipts(journal, story, INDEX_EVERY - 3)  # INDEX_EVERY commits, all unlisted: none yet
    assert "ids" not in git(journal, "ls-tree", "--name-only", REF).split()
    receipts(journal, story, 2)  # the first lists those INDEX_EVERY; the next carries it
    commits = journal.history(QID)
    indexes = [entry.oid for entry in commits if "ids" in journal.repo[entry.oid].tree]
    assert indexes == [commits[INDEX_EVERY].oid, commits[INDEX_EVERY + 1].oid]
    tree = lambda oid: journal.repo[oid].tree["ids"].id  # noqa: E731
    assert tree(indexes[0]) == tree(indexes[1])  # carried by oid, not rewritten


def test_a_group_refuses_a_used_id_like_a_single_event(journal):
    story, other = Story(QID), Story("billing-7")
    main_line(journal, story, 2)
    main_line(journal, other, 2)
    taken = journal.entry(journal.head(QID)).event
    reused = as_id(story("comment_added", body="x"), taken.id)
    fine = other("comment_added", body="y")
    answers = apply_all(journal, [reused, fine])
    assert answers[0].decision.outcome == "refused"
    assert "is already used by triage_decided" in answers[0].decision.reason
    assert answers[1].decision.accepted


def _append_without_an_index(journal: Journal, event: BaseEvent) -> None:
    """A commit as journals were written before the ids/ index existed."""
    repo = journal.repo
    quest, head = journal.load(QID)
    decision = decide(quest, event)
    assert decision.accepted
    builder = repo.TreeBuilder(repo[head].tree) if head else repo.TreeBuilder()
    files = {
        "quest.json": decision.quest.to_dict(),
        "event.json": event_to_dict(event),
        "effects.json": [e.to_dict() for e in decision.effects],
    }
    if head is None:
        files["signal.json"] = event.signal.model_dump(mode="json")
    for name, value in files.items():
        builder.insert(name, repo.create_blob(pretty_json(value)), pygit2.GIT_FILEMODE_BLOB)
    sig = signature(event)
    message = commit_message(decision, event, head)
    commit = repo.create_commit(None, sig, sig, message, builder.write(), [head] if head else [])
    repo.references.create(REF, commit, force=True)


def test_a_journal_written_before_the_index_gets_one_listing_its_whole_history(journal):
    story = Story(QID)
    _append_without_an_index(journal, story.signal())
    old = [story("usage_recorded", source="runner", tokens=1) for _ in range(INDEX_EVERY + 5)]
    for event in old:
        _append_without_an_index(journal, event)
    assert apply(journal, as_id(old[0], old[0].id, tokens=2)).decision.outcome == "refused"
    assert apply(journal, story("comment_added", body="new")).decision.accepted
    rows = git(journal, "ls-tree", "-r", REF, "--", "ids").splitlines()
    listed = "".join(git(journal, "show", row.split()[2]) for row in rows).splitlines()
    assert len(listed) == len(old) + 1  # every event before the new commit
    assert first_mismatch(journal, QID) is None
    assert apply(Journal(journal.path), old[3]).duplicate


def test_replay_notices_an_index_edited_by_hand(journal):
    story = Story(QID)
    main_line(journal, story, 3)
    receipts(journal, story, INDEX_EVERY)
    head = journal.head(QID)
    commit = journal.repo[head]
    ids = commit.tree["ids"]
    name = next(iter(ids)).name
    builder = journal.repo.TreeBuilder(ids)
    builder.insert(name, journal.repo.create_blob(b""), pygit2.GIT_FILEMODE_BLOB)  # emptied
    root = journal.repo.TreeBuilder(commit.tree)
    root.insert("ids", builder.write(), pygit2.GIT_FILEMODE_TREE)
    forged = journal.repo.create_commit(
        None, commit.author, commit.committer, commit.message, root.write(), commit.parent_ids
    )
    journal.repo.references[REF].set_target(forged)
    fresh = Journal(journal.path)
    assert not replay_journal(fresh, QID).matches
    assert first_mismatch(fresh, QID) == (
        f"{forged}: ids/{name} does not list the events journaled before it"
    )
