"""The ledger from the command line, and commands that change quests while a worker serves."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from ledger.lease import lease_acquire
from ledger.models import AuditEntry, InboundEvent, Operation, UsageReceipt
from ledger.usage import quest_usage, record_usage
from quests.models import Quest
from tests.core.story import Story
from tests.ledger.test_delivery import drive
from worker.loop import Worker


def run(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def ambiguous_land(workspace, adapters) -> Operation:
    drive(workspace, Story("q1"), "landing")
    adapters.BEHAVIOUR["land"] = "raise"
    worker = Worker(owner="w1")
    worker.step()
    worker.release()
    return Operation.objects.get(workspace=workspace, type="land", state="ambiguous")


def test_status_and_list_show_the_ledger(workspace, adapters):
    land = ambiguous_land(workspace, adapters)
    status = run("ledger", "status")
    assert status.startswith("shop: pending=0 started=0 succeeded=")
    assert "ambiguous=1" in status and "served by nobody" in status
    listing = run("ledger", "list", "--state", "ambiguous")
    assert listing.strip() == (
        f"ambiguous 1x {land.key} TimeoutError: no answer from the outside world"
    )


def test_a_person_resolves_an_ambiguous_write_and_it_is_audited(workspace, adapters):
    land = ambiguous_land(workspace, adapters)
    out = run("ledger", "resolve", land.key, "succeeded", "--by", "ann", "--note", "it is on main")
    assert out.strip() == f"{land.key}: now succeeded"
    land.refresh_from_db()
    assert land.outcome["resolved_by"] == "person:ann"
    entry = AuditEntry.objects.get(action="operation.resolved")
    assert (entry.actor, entry.payload["was"], entry.payload["now"]) == (
        "person:ann",
        "ambiguous",
        "succeeded",
    )


def test_resolving_an_operation_that_is_not_ambiguous_is_refused(workspace, adapters):
    drive(workspace, Story("q1"), "landing")
    land = Operation.objects.get(workspace=workspace, type="land")
    before = AuditEntry.objects.count()
    with pytest.raises(CommandError, match="is pending; only ambiguous or dead operations"):
        run("ledger", "resolve", land.key, "failed", "--by", "ann")
    assert AuditEntry.objects.count() == before
    with pytest.raises(CommandError, match="no operation 'nope'"):
        run("ledger", "resolve", "nope", "failed", "--by", "ann")


def test_while_a_worker_serves_the_workspace_a_verdict_is_queued_for_it(workspace, adapters):
    land = ambiguous_land(workspace, adapters)
    worker = Worker(owner="w2")
    worker.step()  # w2 now holds the lease
    out = run("ledger", "resolve", land.key, "absent", "--by", "ann")
    assert out.strip() == f"{land.key}: absent, queued for worker w2"
    land.refresh_from_db()
    assert land.state == "ambiguous"  # the command changed nothing itself
    adapters.BEHAVIOUR["land"] = "ok"
    worker.step()
    land.refresh_from_db()
    assert (land.state, land.attempts) == ("succeeded", 2)
    assert InboundEvent.objects.get(type="operation.resolve").state == "applied"


def test_apply_events_refuses_while_a_worker_serves_and_submit_queues(workspace, tmp_path):
    lease_acquire(workspace.pk, "w9")
    events = tmp_path / "events.jsonl"
    events.write_text(Story("q1").signal().model_dump_json() + "\n")
    with pytest.raises(CommandError, match="workspace shop is served by worker w9"):
        run("apply_events", "shop", str(events))
    assert not Quest.objects.exists()
    out = run("apply_events", "shop", str(events), "--submit", "--wait", "0")
    assert out.strip() == '{"event": "q1-e1", "outcome": "queued", "quest": "q1"}'
    assert InboundEvent.objects.get().event_id == "q1-e1"
    with pytest.raises(CommandError, match=r"1 of 1 events are still queued after 0.1 s"):
        run("apply_events", "shop", str(events), "--submit", "--wait", "0.1")


def test_usage_receipts_are_kept_once_and_summed_even_for_closed_quests(workspace):
    drive(workspace, Story("q1"), "landing")
    record_usage(workspace, "q1", key="r1", source="agent", cost_micros=1500, tokens=900)
    again, created = record_usage(workspace, "q1", key="r1", source="agent", cost_micros=1500)
    assert not created and again.tokens == 900
    record_usage(workspace, "q1", key="r2", source="runner", runner_seconds=42)
    assert quest_usage(workspace, "q1") == {
        "cost_micros": 1500,
        "tokens": 900,
        "runner_seconds": 42,
    }
    with pytest.raises(ValueError, match="never negative"):
        record_usage(workspace, "q1", key="r3", source="agent", tokens=-1)
    assert UsageReceipt.objects.count() == 2


def test_status_names_the_effect_types_no_adapter_serves_and_what_waits_on_them(
    workspace, settings
):
    from ephyra.compose import effect_adapters

    settings.EPHYRA_EFFECT_ADAPTERS = {"run_proof": ""}  # switched off: no adapter here
    effect_adapters.cache_clear()
    drive(workspace, Story("q1"), "proving")  # asks for run_proof
    status = run("ledger", "status")
    assert "  waiting for an adapter: run_proof=1" in status.splitlines()
    assert "effect types without an adapter here: run_proof, run_probes, request_spend" in status


def test_a_worker_says_at_start_which_effect_types_wait_without_an_adapter(
    workspace, caplog, settings
):
    from ephyra.compose import effect_adapters

    settings.EPHYRA_EFFECT_ADAPTERS = {"run_proof": ""}  # switched off: no adapter here
    effect_adapters.cache_clear()
    drive(workspace, Story("q1"), "proving")
    with caplog.at_level("WARNING", logger="worker.loop"):
        Worker(owner="w1").step()
    assert "shop: no adapter for run_proof; their operations wait (run_proof=1)" in (
        caplog.text
    )
    lease = workspace.lease
    lease.refresh_from_db()
    assert "start_agent" in lease.effect_types and "run_proof" not in lease.effect_types


def test_refused_submissions_are_listed_with_their_reasons(workspace):
    from ledger.inbound import submit_event

    story = Story("q1")
    submit_event(workspace, story.signal(), source="test")
    submit_event(workspace, story("landed", commit="f" * 40), source="apply_events")
    Worker(owner="w1").step()
    listing = run("ledger", "refused").splitlines()
    assert len(listing) == 1
    # Both were taken before triage was delivered: the quest was still sensed.
    assert listing[0].endswith(
        "shop q1 q1-e2 landed refused (from apply_events): only a landing quest can land; "
        "the quest is sensed"
    )


def test_the_admins_operation_list_names_effect_types_the_serving_worker_cannot_deliver(
    workspace, client, settings
):
    from django.contrib.auth import get_user_model

    from ephyra.compose import effect_adapters

    settings.EPHYRA_EFFECT_ADAPTERS = {"run_proof": ""}  # switched off: no adapter here
    effect_adapters.cache_clear()
    drive(workspace, Story("q1"), "proving")  # asks for run_proof
    Worker(owner="w1").step()  # w1 serves shop now and said which types it serves
    get_user_model().objects.create_superuser("root", "root@example.com", "pw-for-tests")
    client.login(username="root", password="pw-for-tests")
    page = client.get("/admin/ledger/operation/").content.decode()
    assert (
        "Workspace shop: 1 pending run_proof operation waits: the worker serving it has no "
        "adapter for run_proof"
    ) in page
