"""The worker takes queued events in groups of distinct quests, one transaction a group, each
quest's events in the order they arrived; a group that fails is taken again one event at a
time, so a bad event costs only itself."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from journal import apply as journal_apply
from ledger.inbound import RESOLVE, submit_event
from ledger.lease import lease_acquire
from ledger.models import InboundEvent
from quests.models import Quest
from quests.repair import repair_workspace
from tests.core.story import Story
from worker import inbound as applying
from worker.inbound import inbound_groups
from worker.loop import Worker

Row = InboundEvent


def rows(*quests: str) -> list[InboundEvent]:
    return [Row(pk=n, quest_id=q, type="x") for n, q in enumerate(quests)]


def ids(groups) -> list[list[int]]:
    return [[row.pk for row in group] for group in groups]


def test_groups_hold_one_event_per_quest_and_keep_each_quests_order():
    queue = rows("a", "a", "b", "c", "b", "a", "d")
    assert ids(inbound_groups(queue)) == [[0, 2, 3, 6], [1, 4], [5]]
    assert ids(inbound_groups(queue, size=2)) == [[0, 2], [1, 3], [4, 5], [6]]


def test_a_resolution_waits_for_everything_before_it_and_is_taken_alone():
    queue = rows("a", "b", "a", "c", "d")
    queue[3].type = RESOLVE
    assert ids(inbound_groups(queue)) == [[0, 1], [2], [3], [4]]


def signals_and_triage(workspace, quests: int) -> list[Story]:
    stories = [Story(f"q{n}") for n in range(quests)]
    for story in stories:
        submit_event(workspace, story.signal(fingerprint=f"fp-{story.quest}"), source="test")
    for story in stories:
        triage = story("triage_decided", route="human", risk="low", rule="r")
        submit_event(workspace, triage, source="test")
    return stories


@pytest.mark.django_db
def test_the_worker_takes_the_queue_in_groups_one_commit_each(workspace, monkeypatch):
    signals_and_triage(workspace, quests=6)
    groups = []
    real = applying.quest_apply_all

    def counted(workspace, events, **kw):
        groups.append([event.id for event in events])
        return real(workspace, events, **kw)

    monkeypatch.setattr(applying, "quest_apply_all", counted)
    worker = Worker(owner="w1")
    fence = lease_acquire(workspace.pk, "w1")
    with CaptureQueriesContext(connection) as captured:
        assert worker.take_inbound(fence, workspace) == 12
    assert groups == [[f"q{n}-e1" for n in range(6)], [f"q{n}-e2" for n in range(6)]]
    # One transaction a group (a savepoint here, inside the test's own transaction).
    savepoints = [q for q in captured.captured_queries if q["sql"].startswith("SAVEPOINT")]
    assert len(savepoints) == 2
    states = InboundEvent.objects.values_list("state", flat=True)
    assert set(states) == {"applied"}
    assert set(Quest.objects.values_list("state", flat=True)) == {"triaged"}
    assert all(row.attempts == 1 for row in InboundEvent.objects.all())


@pytest.mark.django_db
def test_a_refused_event_in_a_group_is_marked_refused_and_the_rest_applied(workspace):
    stories = signals_and_triage(workspace, quests=3)
    submit_event(workspace, stories[1]("watch_clean", summary="quiet"), source="test")
    Worker(owner="w1").take_inbound(lease_acquire(workspace.pk, "w1"), workspace)
    refused = InboundEvent.objects.get(type="watch_clean")
    assert refused.state == "refused" and "only while watching" in refused.result["reason"]
    assert InboundEvent.objects.filter(state="applied").count() == 6


@pytest.mark.django_db
def test_a_group_that_raises_is_taken_one_event_at_a_time(workspace, monkeypatch):
    signals_and_triage(workspace, quests=4)
    real = journal_apply.decide

    def broken(quest, event, policy):
        if event.id == "q2-e2":
            raise RuntimeError("a bug that this one event meets every time")
        return real(quest, event, policy)

    monkeypatch.setattr(journal_apply, "decide", broken)
    Worker(owner="w1").take_inbound(lease_acquire(workspace.pk, "w1"), workspace)
    states = dict(InboundEvent.objects.values_list("event_id", "state"))
    assert states.pop("q2-e2") == "pending"  # tried again later, up to the delivery limit
    assert set(states.values()) == {"applied"}
    assert InboundEvent.objects.get(event_id="q2-e2").attempts == 1
    monkeypatch.setattr(journal_apply, "decide", real)
    Worker(owner="w1").take_inbound(lease_acquire(workspace.pk, "w1"), workspace)
    assert InboundEvent.objects.get(event_id="q2-e2").state == "applied"
    assert set(Quest.objects.values_list("state", flat=True)) == {"triaged"}
    assert not repair_workspace(workspace).changed


def test_the_group_size_is_bounded():
    assert applying.GROUP >= 2
    assert ids(inbound_groups(rows(*"abcdefgh"), size=3)) == [[0, 1, 2], [3, 4, 5], [6, 7]]
