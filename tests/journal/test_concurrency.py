"""Real OS processes racing on one repository: CAS loses nothing and creates a quest once."""

from __future__ import annotations

import multiprocessing
import queue
import subprocess
import time
from datetime import timedelta

from ephyra.core.events import parse_event
from journal.apply import apply, replay_journal
from journal.store import Journal
from tests.core.story import T0, Story

QID = "race-1"
PER_WRITER = 200
SPAWN = multiprocessing.get_context("spawn")  # no forked pygit2 state, no fork warnings


def _send_events(path: str, writer: str, count: int, barrier, results) -> None:
    """A worker process: ``count`` events with its own ids, each through the apply loop."""
    journal = Journal(path)
    barrier.wait()
    retries = most = accepted = 0
    for i in range(count):
        base = {"id": f"{writer}-{i}", "quest": QID, "at": (T0 + timedelta(seconds=i)).isoformat()}
        if i % 2:
            event = parse_event(base | {"type": "comment_added", "body": f"{writer} says {i}"})
        else:
            event = parse_event(base | {"type": "usage_recorded", "source": writer, "tokens": i})
        applied = apply(journal, event)
        accepted += applied.decision.accepted
        retries += applied.retries
        most = max(most, applied.retries)
    results.put((writer, accepted, retries, most))


def _create_quests(path: str, writer: str, quest_ids: list[str], barrier, results) -> None:
    """A worker process: try to open every quest, meeting the rival at a barrier each time."""
    journal = Journal(path)
    for quest_id in quest_ids:
        event = parse_event(
            {
                "type": "signal_sensed",
                "id": f"{quest_id}-{writer}",
                "quest": quest_id,
                "at": T0.isoformat(),
                "signal": {"id": f"s-{writer}", "fingerprint": "fp"},
            }
        )
        barrier.wait()
        applied = apply(journal, event)
        results.put(
            (quest_id, writer, applied.decision.outcome, applied.decision.reason, applied.retries)
        )


def _run(target, args_for, writers: list[str], expected_results: int):
    barrier, results = SPAWN.Barrier(len(writers)), SPAWN.Queue()
    procs = [SPAWN.Process(target=target, args=(*args_for(w), barrier, results)) for w in writers]
    for p in procs:
        p.start()
    got: list = []
    deadline = time.monotonic() + 120
    while len(got) < expected_results:
        try:
            got.append(results.get(timeout=0.5))
        except queue.Empty:
            crashed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            assert not crashed, f"a writer process failed (exit codes {crashed})"
            assert time.monotonic() < deadline, "the writers did not finish in time"
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return got


def git(path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(path), *args], capture_output=True, text=True, check=True
    ).stdout


def test_two_processes_writing_one_quest_lose_no_transition(tmp_path):
    journal = Journal.init(tmp_path / "mirror.git")
    story = Story(QID)
    for event in (
        story.signal(),
        story("triage_decided", route="auto_fix"),
        story("research_started"),
    ):
        assert apply(journal, event).decision.accepted

    got = _run(_send_events, lambda w: (journal.path, w, PER_WRITER), ["alpha", "beta"], 2)
    assert sorted(accepted for _, accepted, _, _ in got) == [PER_WRITER, PER_WRITER]
    retries = {writer: (total, most) for writer, _, total, most in got}
    print(f"\nCAS retries (total, most for one event) per writer: {retries}")

    ref = f"refs/ephyra/quests/{QID}"
    total = 3 + 2 * PER_WRITER
    assert int(git(journal.path, "rev-list", "--count", ref)) == total
    assert int(git(journal.path, "rev-list", "--first-parent", "--count", ref)) == total
    parents = [
        line.split()[1:] for line in git(journal.path, "rev-list", "--parents", ref).splitlines()
    ]
    assert sum(len(p) == 1 for p in parents) == total - 1 and parents[-1] == []

    history = journal.history(QID)
    sent = {f"{w}-{i}" for w in ("alpha", "beta") for i in range(PER_WRITER)}
    assert {entry.event.id for entry in history[3:]} == sent
    quest = journal.load(QID)[0]
    assert quest.comments == PER_WRITER  # each writer sent PER_WRITER / 2 comments
    assert quest.usage.receipts == PER_WRITER
    replayed = replay_journal(journal, QID)
    assert replayed.matches and replayed.fold.quest == quest


def test_two_processes_creating_the_same_quest_one_wins_one_is_refused(tmp_path):
    journal = Journal.init(tmp_path / "mirror.git")
    quest_ids = [f"new-{n}" for n in range(15)]
    got = _run(_create_quests, lambda w: (journal.path, w, quest_ids), ["alpha", "beta"], 30)
    lost_after_conflict = 0
    for quest_id in quest_ids:
        outcomes = sorted((o, r, n) for q, _, o, r, n in got if q == quest_id)
        (won, _, _), (lost, reason, retries) = outcomes
        assert (won, lost) == ("accepted", "refused")
        assert reason == f"quest {quest_id} already exists"
        lost_after_conflict += retries > 0
        assert len(journal.history(quest_id)) == 1
    print(f"\nrefusals that came after a lost create CAS: {lost_after_conflict}/{len(quest_ids)}")
    assert journal.quest_ids() == sorted(quest_ids)
