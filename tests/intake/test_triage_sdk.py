"""Triage behind a real sender: the OpenTelemetry SDK's OTLP/HTTP exporter against a live
Ephyra server, one export per error as ``SimpleLogRecordProcessor`` sends them, then the
workspace's worker. A burst makes one quest with a count; an ignored error is muted and its
repeats are counted, not turned into quests."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings

from intake.otlp.models import FingerprintMute, IngestedSignal, MergeWindow, MinuteCount
from intake.otlp.sightings import merges_carry
from intake.otlp.tokens import token_create
from ledger.models import InboundEvent
from quests.models import Quest
from tests.intake.test_otlp_sdk import send_log
from tests.intake.test_triage_routes import quest, use_policy
from worker.loop import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("committed")]


@pytest.fixture
def token(workspace) -> str:
    return token_create(workspace, name="sdk")[1]


@pytest.fixture
def worker(workspace):
    worker = Worker(owner="w-triage-sdk")
    yield worker
    worker.release()


IGNORE_VALUE_ERRORS = """\
version: 1
checkpoints: {A: {mode: blocking}, B: {mode: blocking}, C: {mode: blocking}}
proof: {attempts: 3, matrix: {low: [tests], medium: [tests], high: [tests]}}
triage:
  default: {route: human, risk: medium}
  mute_hours: 6
  rules:
    - name: gateway refusals are noise
      when: {exception_types: [ValueError]}
      route: ignore
"""


def test_a_burst_from_the_sdk_makes_one_quest_with_its_count(live_server, token, worker):
    headers = {"Authorization": f"Bearer {token}"}
    for _ in range(4):
        send_log(live_server.url, headers)
    assert sorted(IngestedSignal.objects.values_list("event", flat=True)) == [
        "signal_merged",
        "signal_merged",
        "signal_merged",
        "signal_sensed",
    ]
    assert MinuteCount.objects.get().signals == 4
    worker.step()
    (row,) = Quest.objects.all()
    # the second export's repeat is merged at once; the next two wait for the window's end
    assert row.signal_count == 2 and row.state == "triaged"
    window = MergeWindow.objects.get()
    merges_carry(
        window.workspace,
        row.quest_id,
        window.last_event_at + timedelta(seconds=settings.EPHYRA_MERGE_WINDOW_SECONDS),
    )
    worker.step()
    assert Quest.objects.get().signal_count == 4


def test_an_ignored_error_from_the_sdk_is_muted_and_its_repeats_counted(
    live_server, token, workspace, worker
):
    use_policy(workspace, IGNORE_VALUE_ERRORS)
    headers = {"Authorization": f"Bearer {token}"}
    send_log(live_server.url, headers)
    worker.step()
    (row,) = Quest.objects.all()
    muted = quest(workspace, row.quest_id)
    assert (str(muted.state), muted.route) == ("abandoned", "ignore")
    events = InboundEvent.objects.count()
    send_log(live_server.url, headers)
    send_log(live_server.url, headers)
    worker.step()
    mute = FingerprintMute.objects.get()
    assert (mute.quest_id, mute.muted_signals) == (row.quest_id, 2)
    assert (mute.until - muted.updated_at).total_seconds() == 6 * 3600
    assert InboundEvent.objects.count() == events and Quest.objects.count() == 1
