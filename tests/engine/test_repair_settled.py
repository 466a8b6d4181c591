"""Ledger rows that repair rebuilds come back in the state the journal shows: an effect whose
outcome events are journaled was delivered, and is not delivered again."""

from __future__ import annotations

from ledger.inbound import submit_event
from ledger.models import InboundEvent, Operation
from quests.models import Quest
from quests.repair import repair_workspace
from tests.core.story import Story
from worker.loop import Worker


def test_a_delivered_effect_rebuilt_by_repair_is_succeeded_and_not_delivered_again(workspace):
    submit_event(workspace, Story("q1").signal(), source="test")
    Worker(owner="w1").step()  # applies the signal, delivers run_triage, feeds triage_decided
    triage = Operation.objects.get(type="run_triage")
    assert (triage.state, triage.attempts) == ("succeeded", 1)
    assert Quest.objects.get().state == "triaged"

    # The database loses the ledger and the projections (restored from an old backup, say).
    Operation.objects.all().delete()
    Quest.objects.all().delete()
    InboundEvent.objects.all().delete()
    report = repair_workspace(workspace)
    assert triage.key in report.operations_created

    rebuilt = Operation.objects.get(key=triage.key)
    assert (rebuilt.state, rebuilt.attempts) == ("succeeded", 0)
    assert rebuilt.outcome["detail"]["rebuilt"] == "its outcome events are in the journal"
    Worker(owner="w2").step()
    rebuilt.refresh_from_db()
    assert (rebuilt.state, rebuilt.attempts) == ("succeeded", 0)  # not delivered again
    assert Quest.objects.get().state == "triaged"


def test_an_effect_whose_outcome_never_reached_the_journal_is_rebuilt_pending(workspace):
    submit_event(workspace, Story("q1").signal(), source="test")
    worker = Worker(owner="w1")
    worker.acquire()
    for fence in worker.fences.values():
        worker.take_inbound(fence, workspace)  # applied, but run_triage not yet delivered
    Operation.objects.all().delete()
    Quest.objects.all().delete()
    repair_workspace(workspace)
    assert Operation.objects.get(type="run_triage").state == "pending"
