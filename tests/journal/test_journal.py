"""The journal in a real repository: what plain git sees, CAS, apply, history and replay."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime

import pygit2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ephyra.core.machine import decide, fold
from ephyra.core.quest import Quest
from journal.apply import apply, first_mismatch, replay_journal
from journal.format import commit_message, pretty_json, read_json, signature
from journal.store import Journal, JournalConflict, JournalError
from tests.core.lifecycle_helpers import next_event
from tests.core.story import Story

QID = "checkout-500"
REF = f"refs/ephyra/quests/{QID}"
TRAILERS = (
    "Ephyra-Event-Type",
    "Ephyra-Event",
    "Ephyra-Previous-State",
    "Ephyra-State",
    "Ephyra-Revision",
    "Ephyra-Machine-Version",
    "Ephyra-Previous-Head",
)


def git(repo_dir, *args: str) -> str:
    done = subprocess.run(
        ["git", "--git-dir", str(repo_dir), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def main_line(journal: Journal, story: Story, steps: int):
    """Apply the main line's first ``steps`` events; returns the events and the final quest."""
    events, quest = [], None
    for _ in range(steps):
        event = next_event(story, quest)
        applied = apply(journal, event)
        assert applied.decision.accepted, applied.decision.reason
        events.append(event)
        quest = applied.decision.quest
    return events, quest


@pytest.fixture(params=["bare", "worktree"])
def journal(request, tmp_path) -> Journal:
    if request.param == "bare":
        return Journal.init(tmp_path / "mirror.git")
    subprocess.run(["git", "init", "-q", str(tmp_path / "wc")], check=True)
    return Journal(tmp_path / "wc")


def test_git_log_shows_one_commit_per_accepted_transition_with_trailers(journal):
    story = Story(QID)
    events, quest = main_line(journal, story, 12)  # signal_sensed … watch_clean: closed
    refused = apply(journal, story("triage_decided", route="auto_fix"))  # absorbed: closed
    assert refused.decision.outcome == "absorbed"
    assert apply(journal, story("hypothesis_written", summary="x")).decision.outcome == "absorbed"

    log = git(journal.path, "log", "--format=%H%x00%s%x00%(trailers)%x01", REF)
    commits = [c.strip("\n").split("\x00") for c in log.split("\x01") if c.strip()]
    assert len(commits) == len(events) == 12
    previous_state = "none"
    for (oid, subject, trailers), event in zip(reversed(commits), events, strict=True):
        fields = dict(line.split(": ", 1) for line in trailers.splitlines() if line)
        assert set(TRAILERS) <= set(fields)
        assert fields["Ephyra-Event"] == event.id
        assert fields["Ephyra-Event-Type"] == event.type
        assert subject.startswith(f"{QID}: ") and subject.endswith(f"({event.type} {event.id})")
        parents = git(journal.path, "rev-list", "--parents", "-n1", oid).split()[1:]
        assert fields["Ephyra-Previous-Head"] == (parents[0] if parents else "none")
        assert fields["Ephyra-Previous-State"] == previous_state  # the log tells the story
        previous_state = fields["Ephyra-State"]
    assert commits[-1][1] == f"{QID}: new quest → sensed (signal_sensed {QID}-e1)"
    assert commits[0][1] == f"{QID}: watching → closed (watch_clean {QID}-e12)"

    shown = json.loads(git(journal.path, "show", f"{REF}:quest.json"))
    assert Quest.from_dict(shown) == quest == journal.load(QID)[0]
    assert git(journal.path, "for-each-ref", "--format=%(refname)", "refs/ephyra/").split() == [REF]


def test_the_tree_holds_the_quests_files_at_readable_paths(journal):
    _, quest = main_line(journal, Story(QID), 11)  # through landed: watching
    files = git(journal.path, "ls-tree", "-r", "--name-only", REF).split()
    assert files == [
        "decisions/001-A.json",
        "decisions/002-B.json",
        "decisions/003-C.json",
        "effects.json",
        "event.json",
        "hypothesis.md",
        "plan.md",
        "proof/bundle.json",
        "quest.json",
        "signal.json",
    ]
    show = lambda path: git(journal.path, "show", f"{REF}:{path}")  # noqa: E731
    assert show("hypothesis.md") == quest.hypothesis + "\n"
    assert show("plan.md") == quest.plan + "\n"
    assert json.loads(show("signal.json"))["id"] == "s1"
    proof = json.loads(show("proof/bundle.json"))
    assert proof["digest"] == quest.proof_digest and proof["bundle"]["head"] == quest.patch_head
    record = json.loads(show("decisions/003-C.json"))
    assert record["checkpoint"] == "C" and record["verdict"] == "approve" and record["advanced"]
    effects = json.loads(show("effects.json"))  # landed asks to watch and keep the probe
    assert [e["type"] for e in effects] == ["start_watch", "register_regression_probe"]
    assert effects[0]["key"] == f"{QID}:1:start_watch:{QID}-e11:0"
    trailers = git(journal.path, "log", "-1", "--format=%(trailers:only,unfold)", REF)
    assert "Ephyra-Previous-State: landing\nEphyra-State: watching\n" in trailers
    assert show("quest.json") == pretty_json(quest.to_dict()).decode()  # sorted, a field a line
    assert show("quest.json").splitlines()[1].startswith('  "approval_c": ')


def test_unchanged_files_are_carried_forward_by_oid(journal):
    story = Story(QID)
    main_line(journal, story, 4)  # hypothesised
    before = journal.repo[journal.head(QID)].tree
    apply(journal, story("comment_added", body="looks right"))
    after = journal.repo[journal.head(QID)].tree
    for name in ("signal.json", "hypothesis.md"):
        assert after[name].id == before[name].id
    for name in ("quest.json", "event.json"):
        assert after[name].id != before[name].id
    assert json.loads(after["effects.json"].data) == []


def test_identical_events_give_identical_commits(tmp_path):
    heads = []
    for name in ("a.git", "b.git"):
        journal = Journal.init(tmp_path / name)
        main_line(journal, Story(QID), 9)
        heads.append(journal.head(QID))
    assert heads[0] == heads[1]
    journal = Journal(tmp_path / "a.git")
    commit = journal.repo[heads[0]]
    assert (commit.author.name, commit.author.email) == ("Ephyra", "ephyra@localhost")
    assert commit.commit_time == int(journal.load(QID)[0].updated_at.timestamp())  # not the clock


def test_the_objects_written_as_bytes_are_what_libgit2_and_git_fsck_accept(journal):
    main_line(journal, Story(QID), 11)  # every kind of file, both subtrees
    repo = journal.repo
    for oid in journal.commits(journal.head(QID)):
        commit = repo[oid]
        # create_commit with the same inputs gives the same commit id
        sig, message = commit.author, commit.message
        assert repo.create_commit(None, sig, sig, message, commit.tree_id, commit.parent_ids) == oid
        rebuilt = repo.TreeBuilder()
        for item in commit.tree:
            rebuilt.insert(item.name, item.id, item.filemode)
        assert rebuilt.write() == commit.tree_id  # entries in git's order
    git(journal.path, "fsck", "--strict", "--no-dangling")


@pytest.mark.parametrize("offset", ["-03:30", "+05:45", "+00:00"])
def test_a_commit_at_any_utc_offset_is_the_one_create_commit_writes(tmp_path, offset):
    journal = Journal.init(tmp_path / "j.git")
    story = Story(QID, start=datetime.fromisoformat(f"2026-01-05T09:00:00{offset}"))
    head = apply(journal, story.signal()).head
    commit = journal.repo[head]
    assert commit.author.offset == int(offset[0] + "1") * (int(offset[1:3]) * 60 + int(offset[4:]))
    sig = commit.author
    assert journal.repo.create_commit(None, sig, sig, commit.message, commit.tree_id, []) == head


def test_a_linked_worktree_writes_its_journal_into_the_main_repository(tmp_path):
    wc = tmp_path / "wc"
    subprocess.run(["git", "init", "-q", "-b", "main", str(wc)], check=True)
    subprocess.run(
        ["git", "-C", str(wc), "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q",
         "--allow-empty", "-m", "start"],
        check=True,
    )  # fmt: skip
    subprocess.run(
        ["git", "-C", str(wc), "worktree", "add", "-q", str(tmp_path / "linked")], check=True
    )
    linked = Journal(tmp_path / "linked")
    main_line(linked, Story(QID), 3)
    assert Journal(wc).load(QID) == linked.load(QID)
    git(wc / ".git", "fsck", "--strict", "--no-dangling")


@pytest.mark.parametrize("setting", [True, False])
def test_objects_are_fsynced_when_the_repository_asks_for_it(tmp_path, monkeypatch, setting):
    repo = pygit2.init_repository(str(tmp_path / "j.git"), bare=True)
    repo.config["core.fsyncObjectFiles"] = setting
    made = []
    real = pygit2.OdbBackendLoose

    def loose(objects_dir, compression, do_fsync, *rest):
        made.append((objects_dir, do_fsync))
        return real(objects_dir, compression, do_fsync, *rest)

    monkeypatch.setattr(pygit2, "OdbBackendLoose", loose)
    journal = Journal(tmp_path / "j.git")
    apply(journal, Story(QID).signal())
    assert made == [(f"{journal.path}objects", setting)]


def _append_in_the_old_layout(journal: Journal, event) -> None:
    """A commit as journals were written before the decision moved into the trailers: a
    decision.json file and no Ephyra-Previous-State trailer."""
    repo = journal.repo
    quest, head = journal.load(QID)
    decision = decide(quest, event)
    builder = repo.TreeBuilder(repo[head].tree) if head else repo.TreeBuilder()
    files = {
        "quest.json": decision.quest.to_dict(),
        "event.json": event.model_dump(mode="json"),
        "effects.json": [e.to_dict() for e in decision.effects],
        "decision.json": decision.to_dict(),
    }
    for name, value in files.items():
        builder.insert(name, repo.create_blob(pretty_json(value)), pygit2.GIT_FILEMODE_BLOB)
    message = "".join(
        line
        for line in commit_message(decision, event, head).splitlines(keepends=True)
        if not line.startswith("Ephyra-Previous-State:")
    )
    sig = signature(event)
    commit = repo.create_commit(None, sig, sig, message, builder.write(), [head] if head else [])
    repo.references.create(REF, commit, force=True)


def test_a_journal_written_in_the_old_layout_still_reads_and_replays(journal):
    story = Story(QID)
    quest = None
    for _ in range(4):  # sensed … hypothesised, the old way
        event = next_event(story, quest)
        _append_in_the_old_layout(journal, event)
        quest = journal.load(QID)[0]
    assert apply(journal, story("comment_added", body="new layout from here")).decision.accepted
    history = journal.history(QID)
    assert [entry.decision["from"] for entry in history] == [
        None,
        "sensed",
        "triaged",
        "researching",
        "hypothesised",
    ]
    assert replay_journal(journal, QID).matches
    files = git(journal.path, "ls-tree", "--name-only", REF).split()
    assert "decision.json" not in files  # not carried into new commits


def test_a_stale_writer_conflicts_and_apply_decides_again(journal):
    story = Story(QID)
    main_line(journal, story, 3)  # researching
    quest, stale = journal.load(QID)
    late = story("comment_added", body="from a slow worker")
    decision = decide(quest, late)
    apply(journal, story("comment_added", body="from a fast worker"))  # moves the ref
    moved = journal.head(QID)

    with pytest.raises(JournalConflict) as caught:
        journal.append(QID, stale, decision, late)
    assert caught.value.expected == stale and caught.value.actual == moved
    assert journal.head(QID) == moved

    applied = apply(journal, late, rng=None)
    assert applied.decision.accepted and applied.head == journal.head(QID)
    assert journal.load(QID)[0].comments == 2  # decided against the new head, not the stale one


def test_an_event_that_became_invalid_gets_its_refusal_and_the_journal_is_unchanged(journal):
    story = Story(QID)
    main_line(journal, story, 3)  # researching
    quest, stale = journal.load(QID)
    paused_late = story("paused", reason="operator")
    assert decide(quest, paused_late).accepted  # valid against the head it was decided on
    apply(journal, story("paused", reason="someone else"))  # now parked
    head = journal.head(QID)
    with pytest.raises(JournalConflict):
        journal.append(QID, stale, decide(quest, paused_late), paused_late)

    applied = apply(journal, paused_late)
    assert applied.decision.outcome == "refused"
    assert applied.decision.reason == "the quest is already parked"
    assert applied.head == head == journal.head(QID)


def test_apply_retries_a_lost_race_with_backoff(journal, monkeypatch):
    story = Story(QID)
    main_line(journal, story, 3)
    rival = story("comment_added", body="rival")
    other_writer = Journal(journal.path)
    real_append = journal.append
    calls = []

    def racing_append(quest_id, expected, decision, event):
        if not calls:  # the first time, another writer lands just before us
            calls.append(apply(other_writer, rival))
        return real_append(quest_id, expected, decision, event)

    monkeypatch.setattr(journal, "append", racing_append)
    slept: list[float] = []
    applied = apply(journal, story("comment_added", body="mine"), sleep=slept.append)
    assert applied.retries == 1 and len(slept) == 1 and 0 <= slept[0] <= 0.02
    assert journal.load(QID)[0].comments == 2


def test_a_held_lock_makes_other_writers_conflict_until_it_lands(journal):
    story = Story(QID)
    main_line(journal, story, 3)
    other = Journal(journal.path)
    quest, head = other.load(QID)
    rival = story("comment_added", body="rival")
    with journal.locked(QID) as slot:
        assert (slot.quest, slot.head) == (quest, head)
        mine = story("comment_added", body="mine")
        new = slot.append(decide(slot.quest, mine), mine)
        with pytest.raises(JournalConflict, match="locked"):
            other.append(QID, head, decide(quest, rival), rival)
        assert journal.head(QID) == head  # the ref moves when the block ends
    assert journal.head(QID) == new
    with pytest.raises(JournalConflict):  # the rival's head is stale now
        other.append(QID, head, decide(quest, rival), rival)


def test_a_writer_that_keeps_losing_takes_the_lock_and_wins(journal, monkeypatch):
    story = Story(QID)
    main_line(journal, story, 3)
    other_writer = Journal(journal.path)
    rivals = iter(story("comment_added", body=f"rival {i}") for i in range(100))

    def always_beaten(quest_id, expected, decision, event):
        apply(other_writer, next(rivals))  # someone else lands first, every time
        raise JournalConflict(quest_id, expected, other_writer.head(quest_id))

    monkeypatch.setattr(journal, "append", always_beaten)
    applied = apply(journal, story("comment_added", body="mine"), sleep=lambda _: None)
    assert applied.decision.accepted and applied.retries == 4  # LOCK_AFTER optimistic losses
    assert applied.parent == journal.repo[applied.head].parent_ids[0]
    assert journal.load(QID)[0].comments == 5 and applied.head == journal.head(QID)
    assert replay_journal(journal, QID).matches


def test_apply_says_which_head_an_accepted_event_was_appended_to(journal):
    story = Story(QID)
    created = apply(journal, story.signal())
    assert created.parent is None
    triaged = apply(journal, story("triage_decided", route="auto_fix", risk="low"))
    assert triaged.parent == created.head == journal.repo[triaged.head].parent_ids[0]


def test_a_redelivered_event_is_not_journaled_twice(journal):
    story = Story(QID)
    main_line(journal, story, 3)
    comment = story("comment_added", body="once")
    first = apply(journal, comment)
    again = apply(journal, comment)
    assert again.duplicate and again.head == first.head
    assert again.decision.to_dict() == first.decision.to_dict()
    assert again.decision.effects == first.decision.effects
    assert journal.load(QID)[0].comments == 1


def test_a_redelivered_creation_is_a_duplicate_not_a_refusal(journal):
    sensed = Story(QID).signal()
    created = apply(journal, sensed)
    again = apply(journal, sensed)
    assert again.duplicate and again.decision.accepted and again.head == created.head
    assert len(journal.history(QID)) == 1


def test_creating_a_quest_that_exists_conflicts(journal):
    story = Story(QID)
    sensed = story.signal()
    decision = decide(None, sensed)
    journal.append(QID, None, decision, sensed)
    with pytest.raises(JournalConflict, match="already exists"):
        journal.append(QID, None, decision, sensed)
    rival = Story(QID)
    rival.n = 100  # another intake's event for the same quest id, with its own event id
    other = rival.signal(sid="s2")
    refused = apply(journal, other)
    assert refused.decision.outcome == "refused" and "already exists" in refused.decision.reason


def test_a_ref_locked_by_another_writer_is_a_conflict_not_an_error(journal, tmp_path):
    story = Story(QID)
    main_line(journal, story, 3)
    quest, head = journal.load(QID)
    event = story("comment_added", body="x")
    lock = f"{journal.path}/{REF}.lock"
    with open(lock, "w"):
        pass
    with pytest.raises(JournalConflict, match="locked"):
        journal.append(QID, head, decide(quest, event), event)
    new = Story("fresh").signal()
    with open(f"{journal.path}/refs/ephyra/quests/fresh.lock", "w"):
        pass
    with pytest.raises(JournalConflict, match="locked"):
        journal.append("fresh", None, decide(None, new), new)
    assert journal.head("fresh") is None and journal.head(QID) == head


def test_append_refuses_what_is_not_an_accepted_transition(journal):
    story = Story(QID)
    sensed = story.signal()
    with pytest.raises(JournalError, match="only accepted"):
        journal.append(QID, None, decide(None, story("triage_decided", route="human")), sensed)
    with pytest.raises(JournalError, match="does not match"):
        journal.append("other", None, decide(None, sensed), sensed)


def test_history_and_quest_ids(journal):
    story = Story(QID)
    events, quest = main_line(journal, story, 6)
    main_line(journal, Story("billing-7"), 2)
    assert journal.quest_ids() == ["billing-7", QID]
    history = journal.history(QID)
    assert [entry.event for entry in history] == events
    assert history[-1].quest == quest and history[-1].oid == journal.head(QID)
    assert [entry.decision["revision"] for entry in history] == [1] * 6
    assert fold([entry.event for entry in history]).quest == quest
    assert journal.history("nobody") == [] and journal.load("nobody") == (None, None)
    assert journal.read(QID, "hypothesis.md") == (quest.hypothesis + "\n").encode()
    assert journal.read(QID, "proof/bundle.json") is None


def test_since_reads_the_head_quest_and_the_effects_after_a_commit(journal):
    main_line(journal, Story(QID), 8)
    head = journal.head(QID)
    commits = list(journal.commits(head))
    every = [(oid, effects) for oid in commits if (effects := journal.effects(oid))]
    assert len(every) >= 2  # the main line asks for effects on the way
    whole = journal.since(head)
    assert whole.quest == journal.read(QID, "quest.json")
    assert whole.effects == every  # newest first, only the commits that asked for any
    stop = every[1][0]  # the second newest commit with effects: it and older ones are left out
    assert journal.since(head, stop).effects == [
        (oid, effects) for oid, effects in every if commits.index(oid) < commits.index(stop)
    ]
    assert journal.since(head, head).effects == []


def test_replay_matches_an_honest_journal_and_not_a_tampered_one(journal):
    _, quest = main_line(journal, Story(QID), 12)
    replayed = replay_journal(journal, QID)
    assert replayed.matches and replayed.stored == quest == replayed.fold.quest

    # Rewrite the head by hand: same parent, same message, a quest.json that lies.
    repo = journal.repo
    head = repo[journal.head(QID)]
    lie = quest.to_dict() | {"comments": 99}
    builder = repo.TreeBuilder(head.tree)
    builder.insert("quest.json", repo.create_blob(pretty_json(lie)), pygit2.GIT_FILEMODE_BLOB)
    forged = repo.create_commit(
        None, head.author, head.committer, head.message, builder.write(), head.parent_ids
    )
    repo.references[REF].set_target(forged)

    tampered = replay_journal(journal, QID)
    assert not tampered.matches
    assert tampered.stored.comments == 99 and tampered.fold.quest == quest
    assert "quest.json" in first_mismatch(journal, QID)


def test_replay_notices_a_commit_message_that_lies_about_the_transition(journal):
    main_line(journal, Story(QID), 5)
    repo = journal.repo
    head = repo[journal.head(QID)]
    lie = head.message.replace(
        "Ephyra-Previous-State: hypothesised", "Ephyra-Previous-State: sensed"
    )
    assert lie != head.message
    forged = repo.create_commit(
        None, head.author, head.committer, lie, head.tree_id, head.parent_ids
    )
    repo.references[REF].set_target(forged)
    assert not replay_journal(journal, QID).matches
    assert "trailers" in first_mismatch(journal, QID)


def test_a_merge_commit_in_a_journal_is_refused(journal):
    main_line(journal, Story(QID), 2)
    repo = journal.repo
    head = repo[journal.head(QID)]
    merge = repo.create_commit(
        None, head.author, head.committer, "merge", head.tree_id, [head.id, head.parent_ids[0]]
    )
    repo.references[REF].set_target(merge)
    with pytest.raises(JournalError, match="linear"):
        journal.history(QID)
    with pytest.raises(JournalError, match="linear"):
        journal.since(merge)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _typed(value):
    """``value`` with each number's type beside it: 2**64 == float(2**64), but a journal that
    read an integer back as a float would be wrong."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, repr(value))


@given(JSON)
def test_journal_json_reads_back_as_the_value_it_was_written_from(value):
    data = pretty_json(value)
    text = data.decode()
    assert json.loads(text) == value and text.endswith("\n")
    assert _typed(read_json(data)) == _typed(json.loads(text)) == _typed(value)


@pytest.mark.parametrize(
    "data",
    [
        pretty_json(2**64),  # orjson alone would read these two as floats
        pretty_json(-(2**63) - 1),
        pretty_json({"n": [2**63 - 1, -(2**63), 2**200], "s": "12345678901234567890"}),
        pretty_json([1e308, -0.0, 5e-324, 0.1]),
        pretty_json({"é": "日本", "": None, "t": True}),
        b'"\\ud800"\n',  # a lone surrogate, escaped: orjson refuses it, json reads it
        b"[1e400, NaN]\n",  # which the journal never writes, but a hand edit may
    ],
)
def test_journal_json_reads_what_json_reads_however_it_is_read(data):
    assert repr(_typed(read_json(data))) == repr(_typed(json.loads(data)))


def test_journal_json_puts_one_field_per_line_with_sorted_keys():
    text = pretty_json({"b": [{"y": 1, "x": 2}], "a": "é", "c": {"z": None, "k": []}}).decode()
    assert text == (
        '{\n  "a": "é",\n  "b": [\n    {"x": 2, "y": 1}\n  ],\n  "c": {"k": [], "z": null}\n}\n'
    )


@settings(max_examples=20)
@given(st.lists(st.sampled_from(["comment", "usage", "pause", "resume", "next"]), max_size=25))
def test_any_journal_written_through_apply_replays_to_its_head(tmp_path_factory, steps):
    journal = Journal.init(tmp_path_factory.mktemp("prop") / "j.git")
    story = Story(QID)
    accepted = 0
    quest = None
    for step in ["next", *steps]:
        if step == "comment":
            event = story("comment_added", body="hi", reply_requested=True)
        elif step == "usage":
            event = story("usage_recorded", source="runner", cost_micros=5, tokens=7)
        elif step == "pause":
            event = story("paused", reason="operator")
        elif step == "resume":
            event = story("resumed")
        else:
            try:
                event = next_event(story, quest)
            except ValueError:  # off the main line (parked, closed): skip
                continue
        applied = apply(journal, event)
        accepted += applied.decision.accepted
        quest = journal.load(QID)[0]
    assert len(journal.history(QID)) == accepted
    assert replay_journal(journal, QID).matches
