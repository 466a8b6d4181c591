"""The ledger's delivery rules, in one process: claim, deliver once, record, feed back; fencing;
ambiguous writes and their reconciliation; retries and dead letters; superseded effects."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ephyra.core.proof import CheckResult
from ephyra.core.quest import Quest as QuestValue
from ledger import operations
from ledger.inbound import submit_event
from ledger.lease import LeaseLost, lease_acquire
from ledger.models import AuditEntry, InboundEvent, Lease, Operation
from quests.engine import quest_apply
from quests.models import Quest
from quests.workspaces import workspace_journal
from tests.core.lifecycle_helpers import next_event
from tests.core.story import Story
from worker import delivery
from worker.loop import Worker

State = Operation.State
PASSING = (CheckResult(name="tests", passed=True),)


def quest_value(workspace, quest_id="q1") -> QuestValue:
    return QuestValue.from_dict(Quest.objects.get(workspace=workspace, quest_id=quest_id).data)


def drive(workspace, story: Story, until: str) -> None:
    """Apply main-line events directly (test setup, as an admin command would) until ``until``."""
    quest = None
    for _ in range(30):
        if quest is not None and str(quest.state) == until:
            return
        outcome = quest_apply(workspace, next_event(story, quest, checks=PASSING))
        assert outcome.applied.decision.accepted, outcome.applied.decision.reason
        quest = quest_value(workspace, story.quest)
    raise AssertionError(f"{story.quest} never reached {until}")


def test_a_submitted_signal_is_triaged_by_the_worker_and_its_outcome_fed_back(workspace):
    story = Story("q1")
    row = submit_event(workspace, story.signal(), source="test")
    assert submit_event(workspace, story.signal(), source="test").pk != row.pk  # new id, new row
    again = submit_event(workspace, Story("q1").signal(), source="test")
    assert again.pk == row.pk  # the same event id is stored once

    worker = Worker(owner="w1")
    worker.step()

    row.refresh_from_db()
    assert row.state == InboundEvent.State.APPLIED
    triage = Operation.objects.get(workspace=workspace, type="run_triage")
    assert (triage.state, triage.attempts, triage.events_applied) == (State.SUCCEEDED, 1, 1)
    assert triage.owner == "w1" and triage.generation == 1
    quest = quest_value(workspace)
    assert str(quest.state) == "triaged"
    assert quest.last_event == triage.outcome["events"][0]["id"]
    # The fold of the journal equals the projection, outcome events included.
    history = workspace_journal(workspace).history("q1")
    assert [entry.event.type for entry in history][-1] == "triage_decided"


def test_an_effect_is_delivered_once_under_its_ledger_key(workspace, adapters):
    story = Story("q1")
    submit_event(workspace, story.signal(severity="fatal"), source="test")  # policy: auto_fix
    worker = Worker(owner="w1")
    worker.step()
    worker.step()  # nothing left: nothing is asked twice
    agent = Operation.objects.get(workspace=workspace, type="start_agent")
    assert agent.state == State.SUCCEEDED
    keys = [request.key for request in adapters.REQUESTS]
    assert keys == [agent.key]


def test_a_worker_that_lost_its_lease_cannot_write(workspace):
    first = lease_acquire(workspace.pk, "w1")
    Lease.objects.filter(pk=workspace.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    second = lease_acquire(workspace.pk, "w2")
    assert (first.generation, second.generation) == (1, 2)
    head_before = workspace_journal(workspace).head("q1")

    with pytest.raises(LeaseLost, match="generation 1 of w1 is no longer held"):
        delivery.fenced_apply(first, workspace, Story("q1").signal())

    assert workspace_journal(workspace).head("q1") == head_before is None
    assert not Quest.objects.exists()
    delivery.fenced_apply(second, workspace, Story("q1").signal())
    assert Quest.objects.get().state == "sensed"


def test_a_live_lease_is_not_taken_and_a_released_one_is(workspace):
    first = lease_acquire(workspace.pk, "w1")
    assert lease_acquire(workspace.pk, "w2") is None
    assert lease_acquire(workspace.pk, "w1") == first  # renewal keeps the generation
    Worker(owner="w1").release()  # another process's release does nothing to w1's lease
    assert lease_acquire(workspace.pk, "w2") is None


def test_a_write_without_an_answer_is_ambiguous_and_never_retried(workspace, adapters):
    drive(workspace, Story("q1"), "landing")
    adapters.BEHAVIOUR["land"] = "raise"
    worker = Worker(owner="w1")
    worker.step()
    worker.step()

    land = Operation.objects.get(workspace=workspace, type="land")
    assert land.state == State.AMBIGUOUS
    assert land.outcome["error"] == "TimeoutError: no answer from the outside world"
    assert [r.key for r in adapters.REQUESTS if r.type == "land"] == [land.key]
    assert AuditEntry.objects.filter(action="operation.ambiguous", object=f"operation:{land.key}")


def test_a_check_that_finds_the_write_resolves_it(workspace, adapters):
    drive(workspace, Story("q1"), "landing")
    adapters.BEHAVIOUR["land"] = "raise"
    worker = Worker(owner="w1")
    worker.step()
    adapters.CHECK["land"] = "landed"
    land = Operation.objects.get(workspace=workspace, type="land")
    fence = worker.fences[workspace.pk]
    delivery.check_ambiguous(fence, workspace, land)

    land.refresh_from_db()
    assert land.state == State.SUCCEEDED
    assert land.outcome["resolved_by"] == "ephyra:check"
    resolved = AuditEntry.objects.get(action="operation.resolved")
    assert resolved.payload["was"] == "ambiguous" and resolved.payload["now"] == "succeeded"


def test_an_orphaned_write_becomes_ambiguous_for_the_next_owner(workspace, adapters):
    drive(workspace, Story("q1"), "landing")
    first = lease_acquire(workspace.pk, "w1")
    land = Operation.objects.get(workspace=workspace, type="land")
    assert operations.claim(first, land)  # ... and w1 dies before calling the adapter
    Lease.objects.filter(pk=workspace.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    adapters.CHECK["land"] = "absent"  # the forge can tell it never landed
    Worker(owner="w2").step()

    land.refresh_from_db()
    assert land.state == State.SUCCEEDED  # checked absent, delivered again, now succeeded
    assert land.attempts == 2
    assert [r.attempt for r in adapters.REQUESTS if r.type == "land"] == [2]
    actions = list(AuditEntry.objects.order_by("sequence").values_list("action", flat=True))
    assert actions[-2:] == ["operation.ambiguous", "operation.resolved"]


def test_a_failing_read_is_retried_later_then_dead_lettered(workspace, adapters, settings):
    settings.EPHYRA_RETRY_SECONDS = 0
    settings.EPHYRA_MAX_DELIVERIES = 3
    adapters.BEHAVIOUR["start_agent"] = "raise"
    submit_event(workspace, Story("q1").signal(severity="fatal"), source="test")
    worker = Worker(owner="w1")
    for _ in range(5):
        worker.step()
    agent = Operation.objects.get(workspace=workspace, type="start_agent")
    assert (agent.state, agent.attempts) == (State.DEAD, 3)
    assert len([r for r in adapters.REQUESTS if r.type == "start_agent"]) == 3
    assert AuditEntry.objects.filter(action="operation.dead").count() == 1


def test_a_refused_effect_is_failed_not_retried(workspace, adapters):
    adapters.BEHAVIOUR["start_agent"] = "refuse"
    submit_event(workspace, Story("q1").signal(severity="fatal"), source="test")
    Worker(owner="w1").step()
    agent = Operation.objects.get(workspace=workspace, type="start_agent")
    assert (agent.state, agent.outcome["detail"]) == (
        State.FAILED,
        {"error": "the outside world said no"},
    )


def test_an_effect_the_quest_no_longer_asks_for_is_superseded(workspace, adapters):
    story = Story("q1")
    submit_event(workspace, story.signal(), source="test")
    submit_event(workspace, story("killed", reason="not worth it"), source="test")
    Worker(owner="w1").step()
    triage = Operation.objects.get(workspace=workspace, type="run_triage")
    assert triage.state == State.FAILED
    assert triage.outcome["status"] == "superseded"
    assert "moved on to" in triage.outcome["detail"]["reason"]
    assert str(quest_value(workspace).state) == "abandoned"


def test_a_refused_inbound_event_is_kept_with_its_reason(workspace):
    story = Story("q1")
    row = submit_event(workspace, story("landed", commit="c" * 40), source="test")
    Worker(owner="w1").step()
    row.refresh_from_db()
    assert row.state == InboundEvent.State.REFUSED
    assert row.result["reason"]
    assert not Quest.objects.exists()


def test_a_write_whose_claim_was_taken_over_is_not_sent(workspace, adapters):
    drive(workspace, Story("q1"), "landing")
    first = lease_acquire(workspace.pk, "w1")
    land = Operation.objects.get(workspace=workspace, type="land")
    assert operations.claim(first, land)
    Lease.objects.filter(pk=workspace.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    second = lease_acquire(workspace.pk, "w2")
    assert second.generation == 2

    with pytest.raises(LeaseLost, match="the claim was lost before the write was sent"):
        delivery.deliver(first, workspace, land)  # w1 wakes up late with its old claim

    assert not [r for r in adapters.REQUESTS if r.type == "land"]
    land.refresh_from_db()
    assert (land.state, land.owner) == (State.STARTED, "w1")  # w2's recovery settles it
