"""Which quest an exported error goes to: one quest per fingerprint, open quests first."""

from __future__ import annotations

import re

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from ephyra.telemetry import parse_logs
from intake.otlp.models import IngestedSignal
from intake.otlp.tokens import token_create
from ledger.models import InboundEvent
from quests.engine import quest_apply
from tests.core.story import Story
from tests.intake.test_otlp_refusals import PROTOBUF, error_log, post

IDENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@pytest.fixture
def token(workspace) -> str:
    return token_create(workspace)[1]


def export(*messages: str) -> bytes:
    """One export holding a log record per message (one ResourceLogs each)."""
    request = ExportLogsServiceRequest()
    for message in messages:
        request.MergeFromString(error_log(message))
    return request.SerializeToString()


def fingerprint_of(body: bytes) -> str:
    return parse_logs(body, PROTOBUF).candidates[0].fingerprint


def test_errors_of_one_fingerprint_in_one_export_make_one_quest(client, token):
    assert (
        post(client, export("KeyError: 'price'", "KeyError: 'sku'"), token=token).status_code == 200
    )
    first, second = IngestedSignal.objects.order_by("pk")
    assert first.fingerprint == second.fingerprint
    assert (first.event, second.event) == ("signal_sensed", "signal_merged")
    assert first.quest_id == second.quest_id
    events = list(InboundEvent.objects.order_by("pk"))
    assert [e.type for e in events] == ["signal_sensed", "signal_merged"]
    for event in events:
        assert IDENT.match(event.event_id) and IDENT.match(event.quest_id)


def test_a_retried_export_is_stored_once(client, token):
    body = export("KeyError: 'price'")
    assert post(client, body, token=token).status_code == 200
    assert post(client, body, token=token).status_code == 200
    assert IngestedSignal.objects.count() == 1
    assert InboundEvent.objects.count() == 1


def test_an_error_whose_quest_is_open_merges_into_it(client, token, workspace):
    body = export("KeyError: 'price'")
    story = Story("checkout-keyerror")
    quest_apply(
        workspace,
        story("signal_sensed", signal={"id": "sig-earlier", "fingerprint": fingerprint_of(body)}),
    )
    assert post(client, body, token=token).status_code == 200
    signal = IngestedSignal.objects.get()
    assert (signal.event, signal.quest_id) == ("signal_merged", "checkout-keyerror")
    event = InboundEvent.objects.get()
    assert (event.type, event.quest_id) == ("signal_merged", "checkout-keyerror")


def test_quest_ids_are_the_same_for_the_same_workspace_fingerprint_and_signal(client, token):
    body = export("KeyError: 'price'")
    post(client, body, token=token)
    quest = IngestedSignal.objects.get().quest_id
    IngestedSignal.objects.all().delete()
    InboundEvent.objects.all().delete()
    post(client, body, token=token)
    assert IngestedSignal.objects.get().quest_id == quest


def test_an_error_whose_quest_was_abandoned_opens_a_new_one(client, token, workspace):
    body = export("KeyError: 'price'")
    story = Story("checkout-keyerror")
    quest_apply(
        workspace,
        story("signal_sensed", signal={"id": "sig-earlier", "fingerprint": fingerprint_of(body)}),
    )
    killed = quest_apply(workspace, story("killed", reason="won't fix"))
    assert killed.applied.decision.accepted
    assert post(client, body, token=token).status_code == 200
    signal = IngestedSignal.objects.get()
    assert signal.event == "signal_sensed"
    assert signal.quest_id != "checkout-keyerror" and signal.quest_id.startswith("q-")
    assert InboundEvent.objects.get().type == "signal_sensed"
