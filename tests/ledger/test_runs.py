"""Reads and computations are delivered in runs (one claim and one outcome transaction a run),
and a run changes nothing a one-at-a-time delivery would decide: ledger order holds, writes go
alone, and an operation whose quest was moved by an earlier outcome is judged afresh."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ephyra.compose import effect_adapters
from ephyra.core.events import Paused
from ephyra.core.ports import EffectRequest, EffectResult, outcome_event_id
from ledger import operations
from ledger.lease import LeaseLost, lease_acquire
from ledger.models import Lease, Operation
from quests.engine import quest_apply
from quests.models import Quest
from tests.core.story import Story
from tests.ledger import recorder
from worker import delivery
from worker.loop import Worker

State = Operation.State
ORDER: list[str] = []


class Pausing:
    """A computation whose outcome parks its quest: the quest's later requests are stale."""

    def run(self, request: EffectRequest) -> EffectResult:
        ORDER.append(request.key)
        event = Paused(
            id=outcome_event_id(request.key, 0),
            quest=request.quest_id,
            at=timezone.now(),
            reason="paused by the outcome",
        )
        return EffectResult("succeeded", {}, (event,))

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None


class Noting:
    def run(self, request: EffectRequest) -> EffectResult:
        ORDER.append(request.key)
        return EffectResult("succeeded", {})

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None


class Landing(Noting):
    def run(self, request: EffectRequest) -> EffectResult:
        assert request.still_holder()  # a write is claimed alone, and checked before it is sent
        return super().run(request)


@pytest.fixture
def routed(settings):
    ORDER.clear()
    recorder.reset()
    settings.EPHYRA_EFFECT_ADAPTERS = {
        "run_triage": "",
        "start_agent": "tests.ledger.test_runs.Pausing",
        "notify_inbox": "tests.ledger.test_runs.Noting",
        "land": "tests.ledger.test_runs.Landing",
    }
    effect_adapters.cache_clear()
    yield
    effect_adapters.cache_clear()


def _quests(workspace, count: int) -> dict[str, str]:
    for i in range(count):
        quest_apply(workspace, Story(f"q{i}").signal(fingerprint=f"fp{i}"))
    return dict(Quest.objects.filter(workspace=workspace).values_list("quest_id", "journal_head"))


def _pending(workspace, quest: str, head: str, type_: str, n: int) -> Operation:
    return Operation.objects.create(
        key=f"{quest}:1:{type_}:run{n}:0",
        workspace=workspace,
        quest_id=quest,
        type=type_,
        journal_commit=head,
    )


def _states(ops: list[Operation]) -> set[str]:
    return set(
        Operation.objects.filter(pk__in=[op.pk for op in ops]).values_list("state", flat=True)
    )


def test_a_run_is_claimed_and_recorded_in_one_transaction_each_in_ledger_order(workspace, routed):
    heads = _quests(workspace, 5)
    ops = [
        _pending(workspace, quest, head, "notify_inbox", n)
        for n, (quest, head) in enumerate(sorted(heads.items()))
    ]
    worker = Worker(owner="w1")
    worker.acquire()
    with CaptureQueriesContext(connection) as queries:
        worker.step()
    assert [op.key for op in ops] == ORDER
    assert _states(ops) == {State.SUCCEEDED}
    updates = [q["sql"] for q in queries if q["sql"].startswith('UPDATE "ledger_operation"')]
    # One claim for the run, then one outcome per operation, all in the second transaction.
    assert len(updates) == 1 + len(ops)


def test_a_write_between_reads_goes_alone_and_in_its_place(workspace, routed):
    heads = sorted(_quests(workspace, 3).items())
    first = _pending(workspace, *heads[0], "notify_inbox", 0)
    write = _pending(workspace, *heads[1], "land", 1)
    last = _pending(workspace, *heads[2], "notify_inbox", 2)
    Worker(owner="w1").step()
    assert [first.key, write.key, last.key] == ORDER
    assert Operation.objects.get(pk=write.pk).state == State.SUCCEEDED


def test_an_operation_of_a_quest_moved_by_an_earlier_outcome_is_superseded(workspace, routed):
    ((quest, head),) = _quests(workspace, 1).items()
    pausing = _pending(workspace, quest, head, "start_agent", 0)
    stale = _pending(workspace, quest, head, "notify_inbox", 1)
    Worker(owner="w1").step()
    assert [pausing.key] == ORDER  # the second was never sent
    stale.refresh_from_db()
    assert stale.state == State.FAILED and stale.outcome["status"] == "superseded"
    assert Quest.objects.get(workspace=workspace, quest_id=quest).state == "parked"


def test_a_run_whose_lease_was_lost_records_nothing(workspace, routed):
    heads = sorted(_quests(workspace, 2).items())
    ops = [_pending(workspace, q, h, "notify_inbox", n) for n, (q, h) in enumerate(heads)]
    worker = Worker(owner="w1")
    worker.acquire()
    fence = worker.fences[workspace.pk]
    claimed = operations.claim_batch(fence, ops)
    assert [op.pk for op in claimed] == [op.pk for op in ops]
    # Another worker takes the lease over (generation + 1) before the outcomes are recorded.
    Lease.objects.filter(pk=workspace.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    lease_acquire(workspace.pk, "w2")
    with pytest.raises(LeaseLost):
        delivery.deliver_batch(fence, workspace, claimed)
    states = set(
        Operation.objects.filter(pk__in=[op.pk for op in ops]).values_list("state", flat=True)
    )
    assert states == {State.STARTED}  # the new holder's recovery settles them


def test_a_standing_effect_is_delivered_after_its_quest_moved_on(workspace, routed, settings):
    settings.EPHYRA_EFFECT_ADAPTERS = {
        **settings.EPHYRA_EFFECT_ADAPTERS,
        "resume_dependents": "tests.ledger.test_runs.Noting",
    }
    effect_adapters.cache_clear()
    ((quest, head),) = _quests(workspace, 1).items()
    pausing = _pending(workspace, quest, head, "start_agent", 0)
    standing = _pending(workspace, quest, head, "resume_dependents", 1)
    Worker(owner="w1").step()
    assert [pausing.key, standing.key] == ORDER  # parked meanwhile, the children still hear
    assert Operation.objects.get(pk=standing.pk).state == State.SUCCEEDED
