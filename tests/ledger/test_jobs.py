"""Long effects run as jobs beside the loop: the loop keeps applying events meanwhile, a job's
outcome is fed back by the loop, and ``stop_agent`` stops a running job's command."""

from __future__ import annotations

import pytest

from ephyra.compose import effect_adapters
from ledger.inbound import submit_event
from ledger.models import InboundEvent, Operation
from quests.models import Quest
from tests.audit_tampering import erase_audit_log
from tests.core.story import Story
from tests.ledger import long_adapters
from tests.ledger.test_delivery import drive
from tests.waiting import wait_until
from worker.jobs import JOBS
from worker.loop import Worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def sleeping_step(settings):
    settings.EPHYRA_EFFECT_ADAPTERS = {"start_agent": "tests.ledger.long_adapters.SleepingStep"}
    effect_adapters.cache_clear()
    yield
    JOBS.stop_all()
    JOBS.wait()
    effect_adapters.cache_clear()
    long_adapters.SECONDS["value"] = 30.0
    erase_audit_log()


def op_state(key_part: str) -> str:
    return Operation.objects.get(type="start_agent", key__contains=key_part).state


def test_the_loop_applies_events_while_a_step_runs_and_a_kill_stops_the_step(workspace):
    story = Story("q1")
    drive(workspace, story, "triaged")  # research asked for; the agent starts it
    worker = Worker(owner="w1")
    worker.step()  # claims start_agent and starts its job: a command that sleeps 30 s
    assert JOBS.running() == [("shop", "q1")]
    assert Operation.objects.get(type="start_agent").state == "started"

    comment = submit_event(workspace, story("comment_added", body="still digging?"), source="t")
    worker.step()  # not held up by the job
    comment.refresh_from_db()
    assert comment.state == "applied"

    submit_event(workspace, story("killed", reason="duplicate"), source="t")
    worker.step()  # the kill asks for stop_agent; its adapter stops the job
    assert wait_until(lambda: not JOBS.running(), 20), "the job did not stop"
    assert wait_until(lambda: Operation.objects.get(type="start_agent").state == "failed", 20)
    assert Operation.objects.get(type="start_agent").outcome["detail"] == {"stopped": True}
    stop = Operation.objects.get(type="stop_agent")
    assert (stop.state, stop.outcome["detail"]["stopped"]) == ("succeeded", True)
    assert Quest.objects.get().state == "abandoned"


def test_a_finished_steps_events_are_fed_back_by_the_loop(workspace):
    long_adapters.SECONDS["value"] = 0.2
    drive(workspace, Story("q1"), "triaged")
    worker = Worker(owner="w1")
    worker.step()
    assert wait_until(lambda: Operation.objects.get(type="start_agent").state == "succeeded", 20)
    assert Quest.objects.get().state == "triaged"  # the job never writes the quest
    worker.step()  # the loop feeds the outcome's event
    quest = Quest.objects.get()
    assert (quest.state, quest.data["hypothesis"]) == ("hypothesised", "slept on it")
    assert Operation.objects.get(type="start_agent").events_applied == 2
    assert not InboundEvent.objects.exists()
