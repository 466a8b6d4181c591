"""``apply_events --submit``: one ordered batch, each event's answer printed as the worker
gives it, a refusal named with its reason."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger.models import InboundEvent
from tests.audit_tampering import erase_audit_log
from tests.core.story import Story
from worker.loop import Worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _flushable():
    yield
    erase_audit_log()


def test_each_submitted_event_is_answered_accepted_or_refused_with_its_reason(
    workspace, tmp_path, settings
):
    settings.EPHYRA_POLL_MS = 20
    story = Story("q1")
    events = tmp_path / "events.jsonl"
    lines = [story.signal(), story("landed", commit="f" * 40)]
    events.write_text("".join(e.model_dump_json() + "\n" for e in lines))
    worker = Worker(owner="w1")
    worker.start()
    out = StringIO()
    try:
        with pytest.raises(CommandError, match="1 of 2 events were refused") as raised:
            call_command("apply_events", "shop", str(events), "--submit", stdout=out)
    finally:
        worker.stop()
    assert raised.value.returncode == 1
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert answers[0] == {"event": "q1-e1", "quest": "q1", "outcome": "accepted", "state": "sensed"}
    assert answers[1]["outcome"] == "refused"
    assert answers[1]["reason"].startswith("only a landing quest can land; the quest is")


def test_an_event_id_taken_by_another_event_queues_nothing(workspace, tmp_path):
    story = Story("q1")
    first = tmp_path / "first.jsonl"
    first.write_text(story.signal().model_dump_json() + "\n")
    call_command("apply_events", "shop", str(first), "--submit", "--wait", "0", stdout=StringIO())
    fresh = Story("q2").signal().model_dump_json()
    other = Story("q1").signal(sid="s2").model_dump_json()  # id q1-e1 again, another signal
    second = tmp_path / "second.jsonl"
    second.write_text(fresh + "\n" + other + "\n")
    with pytest.raises(CommandError, match="nothing was queued: event id q1-e1 was taken"):
        call_command("apply_events", "shop", str(second), "--submit", "--wait", "0")
    assert list(InboundEvent.objects.values_list("event_id", flat=True)) == ["q1-e1"]


def test_a_file_that_is_not_utf8_is_refused_naming_file_and_line(workspace, tmp_path):
    events = tmp_path / "latin1.jsonl"
    events.write_bytes(Story("q1").signal().model_dump_json().encode() + b"\n{\"caf\xe9\": 1}\n")
    with pytest.raises(CommandError, match=r"latin1.jsonl:2: the line is not UTF-8 text"):
        call_command("apply_events", "shop", str(events))
    assert not InboundEvent.objects.exists()
