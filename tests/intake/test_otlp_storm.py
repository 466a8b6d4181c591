"""An error storm: every repeat is stored and counted exactly (``MinuteCount``), while the quest
hears of the repeats in one counted ``signal_merged`` per export and per merge window, so its
journal grows with time, not with traffic, and the workspace's worker is free for other work
(``intake/otlp/sightings.py``, docs/grouping.md)."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime, timedelta

import pygit2
import pytest
from django.conf import settings as django_settings
from django.db.models import Sum
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

from ephyra.celery import app
from ephyra.environment import filesystem_broker
from ephyra.telemetry import parse_logs
from intake.otlp.models import IngestedSignal, IngestToken, MergeWindow, MinuteCount
from intake.otlp.services import signals_receive
from intake.otlp.sightings import CARRY_TASK, merges_carry
from intake.otlp.tokens import token_create
from intake.tasks import carry_merges
from journal.store import REF_PREFIX
from ledger.models import InboundEvent
from quests.models import Quest
from tests.intake.conftest import deliver, fixture_bytes
from tests.intake.test_otlp_refusals import PROTOBUF, post
from worker.loop import Worker

STORM = 40_000
T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def copies(n: int, *, at: int = 1_700_000_000, severity: int = 17, message: str = "boom") -> bytes:
    """One export of ``n`` copies of one error, as small as a record can be (about 35 bytes);
    ``at`` (seconds) tells two exports of the same error apart."""
    record = LogRecord(
        time_unix_nano=at * 10**9,
        severity_number=severity,
        body=AnyValue(string_value=f"KeyError: '{message}'"),
    )
    scope = ScopeLogs()
    scope.log_records.extend([record] * n)
    request = ExportLogsServiceRequest(resource_logs=[ResourceLogs(scope_logs=[scope])])
    return request.SerializeToString()


def receive(token: IngestToken, body: bytes, at: datetime) -> None:
    """What the receiver does with an export that arrived at ``at``."""
    result = parse_logs(body, PROTOBUF)
    signals_receive(token, result, body_digest=hashlib.sha256(body).hexdigest(), received_at=at)


def counted() -> int:
    return MinuteCount.objects.aggregate(n=Sum("signals"))["n"] or 0


def merged_counts(workspace) -> list[int]:
    rows = InboundEvent.objects.filter(workspace=workspace, type="signal_merged").order_by("pk")
    return [row.payload["count"] for row in rows]


def journal_commits(workspace, quest_id: str) -> int:
    repo = pygit2.Repository(workspace.repository)
    head = repo.references[REF_PREFIX + quest_id].target
    return sum(1 for _ in repo.walk(head))


@pytest.fixture
def token(workspace) -> str:
    return token_create(workspace, name="storm")[1]


@pytest.fixture
def ingest_token(token) -> IngestToken:
    return IngestToken.objects.get()


@pytest.fixture
def worker(workspace):
    worker = Worker(owner="w-storm")
    yield worker
    worker.release()


def test_a_storm_of_forty_thousand_copies_is_counted_exactly_and_does_not_stall_the_worker(
    client, token, workspace, quests, hooks, worker
):
    quests.ready("checkout-500")  # the quest a reviewer comments on while the storm rages
    body = copies(STORM)
    assert len(body) < django_settings.EPHYRA_OTLP_MAX_BYTES

    response = post(client, body, token=token)

    assert response.status_code == 200, response.content
    assert IngestedSignal.objects.count() == STORM
    (minute,) = MinuteCount.objects.all()
    assert minute.signals == STORM
    # One event opens the quest, one carries the 39,999 repeats: not 40,000 events.
    assert list(InboundEvent.objects.values_list("type", flat=True).order_by("pk")) == [
        "signal_sensed",
        "signal_merged",
    ]
    assert merged_counts(workspace) == [STORM - 1]

    # A reviewer's comment sent after the storm is in the first group the worker applies.
    comment = deliver(client, "github", "issue_comment", fixture_bytes("github", "issue_comment"))
    assert comment.status_code == 202, comment.content
    worker.acquire()
    worker.take_inbound(worker.fences[workspace.pk], workspace)
    assert InboundEvent.objects.get(quest_id="checkout-500").state == "applied"
    assert Quest.objects.get(quest_id="checkout-500").data["comments"] == 1

    worker.step()
    stormy = Quest.objects.exclude(quest_id="checkout-500").get()
    assert stormy.signal_count == STORM
    # sensed, merged, triaged: the journal holds a handful of commits, not 40,000
    assert journal_commits(workspace, stormy.quest_id) <= 4


def test_repeats_within_the_window_are_held_and_carried_by_the_first_export_after_it(
    ingest_token, workspace, worker
):
    receive(ingest_token, copies(3, at=1), T0)  # opens the quest and merges 2 at once
    receive(ingest_token, copies(5, at=2), T0 + timedelta(seconds=10))
    receive(ingest_token, copies(1, at=3, severity=21), T0 + timedelta(seconds=20))  # fatal
    assert merged_counts(workspace) == [2]
    window = MergeWindow.objects.get()
    assert window.held == 6 and window.severity == "fatal"
    fatal = IngestedSignal.objects.get(severity="fatal").signal_id
    assert window.signal_id == fatal

    receive(ingest_token, copies(2, at=4), T0 + timedelta(seconds=60))

    assert merged_counts(workspace) == [2, 8]
    last = InboundEvent.objects.filter(type="signal_merged").latest("pk").payload
    assert last["signal"]["id"] == fatal and last["signal"]["severity"] == "fatal"
    assert MergeWindow.objects.get().held == 0
    worker.step()
    quest = Quest.objects.get()
    assert quest.signal_count == 11 == counted() == IngestedSignal.objects.count()
    assert quest.severity == "fatal"
    assert dict(MinuteCount.objects.values_list("minute", "signals")) == {
        T0: 9,
        T0 + timedelta(minutes=1): 2,
    }


def test_held_repeats_are_carried_when_the_window_ends_without_another_export(
    ingest_token, workspace, worker
):
    start = datetime.now(UTC) - timedelta(minutes=5)
    receive(ingest_token, copies(1, at=1), start)
    receive(ingest_token, copies(1, at=2), start + timedelta(seconds=1))  # merged at once
    receive(ingest_token, copies(4, at=3), start + timedelta(seconds=2))  # held
    quest = MergeWindow.objects.get().quest_id
    assert merges_carry(workspace, quest, start + timedelta(seconds=30)) is None  # too early
    assert merged_counts(workspace) == [1]

    carry_merges(workspace.pk, quest)  # the window's timer, as a worker runs it
    carry_merges(workspace.pk, quest)  # run twice: nothing is left to carry

    assert merged_counts(workspace) == [1, 4]
    worker.step()
    assert Quest.objects.get().signal_count == 6 == counted()


def test_held_repeats_are_carried_by_the_worker_when_no_timer_runs(
    ingest_token, workspace, worker
):
    start = datetime.now(UTC) - timedelta(minutes=5)
    receive(ingest_token, copies(1, at=1), start)
    receive(ingest_token, copies(1, at=2), start + timedelta(seconds=1))  # merged at once
    receive(ingest_token, copies(4, at=3), start + timedelta(seconds=2))  # held, no timer here
    assert MergeWindow.objects.get().held == 4
    worker.step()  # the window is long over: the worker's sweep carries what it held
    worker.step()
    assert merged_counts(workspace) == [1, 4]
    assert MergeWindow.objects.get().held == 0
    assert Quest.objects.get().signal_count == 6 == counted()


def test_an_exporters_retry_of_a_held_export_is_counted_once(ingest_token, workspace):
    receive(ingest_token, copies(2, at=1), T0)
    held = copies(3, at=2)
    receive(ingest_token, held, T0 + timedelta(seconds=5))
    receive(ingest_token, held, T0 + timedelta(seconds=6))  # the same bytes again
    assert MergeWindow.objects.get().held == 3
    assert counted() == 5 == IngestedSignal.objects.count()


def test_a_window_of_zero_gives_every_export_its_own_counted_event(
    ingest_token, workspace, settings
):
    settings.EPHYRA_MERGE_WINDOW_SECONDS = 0
    for n in range(3):
        receive(ingest_token, copies(4, at=n), T0 + timedelta(seconds=n))
    assert merged_counts(workspace) == [3, 4, 4]


def test_a_held_repeat_sets_one_timer_for_the_end_of_its_window(
    ingest_token, workspace, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.EPHYRA_DOORBELL = True
    before = (app.conf.broker_url, app.conf.broker_transport_options)
    options = filesystem_broker(tmp_path / "broker")
    app.conf.update(broker_url="filesystem://", broker_transport_options=options)
    app._after_fork()  # Celery's own reset: no connection pooled for the old broker
    try:
        now = datetime.now(UTC)
        with django_capture_on_commit_callbacks(execute=True):
            receive(ingest_token, copies(2, at=1), now)
            receive(ingest_token, copies(2, at=2), now + timedelta(seconds=1))  # held: a timer
            receive(ingest_token, copies(2, at=3), now + timedelta(seconds=2))  # same window
    finally:
        app.conf.update(broker_url=before[0], broker_transport_options=before[1])
        app._after_fork()
    sent = [json.loads(path.read_bytes()) for path in (tmp_path / "broker" / "queue").iterdir()]
    timers = [m for m in sent if m["headers"]["task"] == CARRY_TASK]
    assert len(timers) == 1
    args, _, _ = json.loads(base64.b64decode(timers[0]["body"]))
    assert args == [workspace.pk, MergeWindow.objects.get().quest_id]
    eta = datetime.fromisoformat(timers[0]["headers"]["eta"])
    assert now + timedelta(seconds=55) < eta < datetime.now(UTC) + timedelta(seconds=60)
