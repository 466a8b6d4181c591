"""The OpenTelemetry Python SDK, pointed at a real Ephyra server, as an application would be:
both of its OTLP/HTTP exporters, ``http/protobuf`` (opentelemetry-exporter-otlp-proto-http) and
``http/json`` (opentelemetry-exporter-otlp-json-http), and their retries of a 429 and a 503."""

from __future__ import annotations

import json
import logging
import urllib.request
import warnings

import pytest
from django.db import OperationalError
from django.db.backends.signals import connection_created
from opentelemetry.exporter.otlp.json.http._log_exporter import (
    OTLPLogExporter as JsonLogExporter,
)
from opentelemetry.exporter.otlp.json.http.trace_exporter import (
    OTLPSpanExporter as JsonSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from intake.otlp.models import IngestedSignal
from intake.otlp.tokens import token_create
from ledger.models import InboundEvent
from tests.intake.test_otlp_tokens import database_text

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("committed")]

SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
RESOURCE = Resource.create(
    {
        "service.name": "shop-api",
        "service.version": "1.4.2",
        "deployment.environment.name": "production",
    }
)


def charge(card: str) -> None:
    raise ValueError(f"payment gateway refused credentials {SECRET} for card {card}")


def checkout() -> ValueError:
    """The same failure for both exporters: the traceback starts where it is caught, here."""
    try:
        charge("4111 1111 1111 1111")
    except ValueError as error:
        return error
    raise AssertionError("charge() did not fail")


# OTEL_EXPORTER_OTLP_PROTOCOL → the SDK's (log exporter, span exporter) for it.
EXPORTERS = {
    "http/protobuf": (OTLPLogExporter, OTLPSpanExporter),
    "http/json": (JsonLogExporter, JsonSpanExporter),
}


@pytest.fixture
def token(workspace) -> str:
    return token_create(workspace, name="sdk")[1]


@pytest.fixture(params=sorted(EXPORTERS))
def protocol(request) -> str:
    return request.param


def send_log(url: str, headers: dict[str, str], protocol: str = "http/protobuf") -> None:
    exporter = EXPORTERS[protocol][0](endpoint=f"{url}/v1/logs", headers=headers)
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = logging.getLogger("shop.checkout")
    with warnings.catch_warnings():
        # 1.45 points to opentelemetry-instrumentation-logging (not installed); same exporter.
        warnings.filterwarnings("ignore", "`LoggingHandler`", DeprecationWarning)
        handler = LoggingHandler(logger_provider=provider)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.exception("checkout failed", exc_info=checkout())
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        provider.shutdown()


def send_span(url: str, headers: dict[str, str], protocol: str = "http/protobuf") -> None:
    exporter = EXPORTERS[protocol][1](endpoint=f"{url}/v1/traces", headers=headers)
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("shop.checkout")
    with tracer.start_as_current_span("POST /checkout") as span:
        span.record_exception(checkout())
    provider.shutdown()


def test_an_sdk_logging_an_exception_opens_a_redacted_fingerprinted_quest(
    live_server, token, protocol
):
    send_log(live_server.url, {"Authorization": f"Bearer {token}"}, protocol)

    signal = IngestedSignal.objects.get()
    assert signal.event == "signal_sensed" and signal.source == "log"
    assert signal.severity == "error"
    assert signal.exception_type == "ValueError"
    assert signal.fingerprint.startswith("v1:") and len(signal.fingerprint) == 67
    assert signal.fingerprint_version == 1
    assert (signal.service, signal.service_version, signal.environment) == (
        "shop-api",
        "1.4.2",
        "production",
    )
    assert "charge" in signal.culprit
    assert signal.frames[0]["function"] == "charge"  # innermost first
    assert "[redacted" in signal.message
    event = InboundEvent.objects.get()
    assert (event.type, event.quest_id, event.source) == ("signal_sensed", signal.quest_id, "otlp")
    assert event.payload["signal"]["id"] == signal.signal_id
    assert event.payload["signal"]["fingerprint"] == signal.fingerprint
    dump = database_text()
    assert SECRET not in dump
    assert "4111 1111 1111 1111" not in dump


def test_a_span_exception_of_the_same_error_merges_into_the_open_quest(
    live_server, token, protocol
):
    headers = {"Authorization": f"Bearer {token}"}
    send_log(live_server.url, headers, protocol)
    send_span(live_server.url, headers, protocol)

    first, second = IngestedSignal.objects.order_by("pk")
    assert second.source == "span_event"
    assert len(second.trace_id) == 32 and len(second.span_id) == 16
    assert second.fingerprint == first.fingerprint
    assert (first.event, second.event) == ("signal_sensed", "signal_merged")
    assert second.quest_id == first.quest_id
    assert list(InboundEvent.objects.order_by("pk").values_list("type", "quest_id")) == [
        ("signal_sensed", first.quest_id),
        ("signal_merged", first.quest_id),
    ]
    assert SECRET not in database_text()


def test_an_sdk_with_a_wrong_token_stores_nothing(live_server, token, protocol, caplog):
    send_log(live_server.url, {"Authorization": "Bearer not-the-token"}, protocol)
    send_span(live_server.url, {"Authorization": "Bearer not-the-token"}, protocol)
    assert IngestedSignal.objects.count() == 0
    assert InboundEvent.objects.count() == 0
    assert "retrying" not in caplog.text  # a 401 is final: the exporter does not send again


def test_a_gzipped_export_from_the_sdk_is_taken(live_server, token, protocol, monkeypatch):
    # What OTEL_EXPORTER_OTLP_COMPRESSION=gzip does: the body goes with Content-Encoding: gzip.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    send_span(live_server.url, {"Authorization": f"Bearer {token}"}, protocol)
    signal = IngestedSignal.objects.get()
    assert (signal.source, signal.exception_type) == ("span_event", "ValueError")


def test_a_throttled_export_is_retried_after_retry_after_and_taken(
    live_server, token, protocol, settings, caplog
):
    # One export per 3 s: the span, sent right after the log, is refused once with
    # Retry-After; the exporter waits that long, sends it again, and it is taken.
    settings.EPHYRA_OTLP_RATE_LIMIT = 1
    settings.EPHYRA_OTLP_RATE_WINDOW = 3
    caplog.set_level(logging.INFO)
    headers = {"Authorization": f"Bearer {token}"}
    send_log(live_server.url, headers, protocol)
    send_span(live_server.url, headers, protocol)

    assert "OTLP export throttled" in caplog.text  # our side: one 429
    assert "retrying in" in caplog.text  # the SDK's side: it waited and sent again
    assert list(IngestedSignal.objects.order_by("pk").values_list("source", "event")) == [
        ("log", "signal_sensed"),
        ("span_event", "signal_merged"),
    ]


class DatabaseDownOnce:
    """The first statement touching the signals table fails as a dropped PostgreSQL connection
    does, in whichever server thread runs it; everything after it is the real database."""

    def __init__(self) -> None:
        self.failures = 0

    def __call__(self, execute, sql, params, many, context):
        if self.failures == 0 and "intake_ingestedsignal" in sql.lower():
            self.failures += 1
            raise OperationalError("server closed the connection unexpectedly")
        return execute(sql, params, many, context)

    def install(self, sender, connection, **kwargs) -> None:
        connection.execute_wrappers.append(self)


def test_an_export_refused_503_while_the_database_is_down_is_retried_and_taken(
    live_server, token, protocol, caplog
):
    down = DatabaseDownOnce()
    caplog.set_level(logging.INFO)
    connection_created.connect(down.install)  # each request thread opens its own connection
    try:
        send_log(live_server.url, {"Authorization": f"Bearer {token}"}, protocol)
    finally:
        connection_created.disconnect(down.install)
    assert down.failures == 1
    assert "OTLP export deferred: the database is unavailable" in caplog.text
    assert "retrying in 5.00s" in caplog.text  # Retry-After: 5, honoured
    signal = IngestedSignal.objects.get()
    assert InboundEvent.objects.get().quest_id == signal.quest_id


def test_a_spec_shaped_json_export_over_http_is_taken(live_server, token):
    """What another SDK or the Collector may send: upper-case hex ids, integer enums, 64-bit
    integers as strings, and fields this receiver does not know, which it must ignore."""
    record = {
        "timeUnixNano": "1767600000000000000",
        "severityNumber": 17,
        "severityText": "ERROR",
        "traceId": "5B8EFFF798038103D269B633813FC60C",
        "spanId": "EEE19B7EC3C1B174",
        "body": {"stringValue": "checkout failed"},
        "attributes": [
            {"key": "exception.type", "value": {"stringValue": "KeyError"}},
            {"key": "exception.message", "value": {"stringValue": f"'price' token={SECRET}"}},
            {"key": "retries", "value": {"intValue": "3"}},
        ],
        "flags": 1,
        "eventName": "checkout.failed",
        "aFieldFromTheFuture": {"nested": [1, 2, 3]},
    }
    body = {
        "resourceLogs": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "shop-api"}}],
                    "droppedAttributesCount": 0,
                },
                "scopeLogs": [{"scope": {"name": "shop"}, "logRecords": [record]}],
                "schemaUrl": "https://opentelemetry.io/schemas/1.30.0",
            }
        ]
    }
    request = urllib.request.Request(
        f"{live_server.url}/v1/logs",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        assert json.loads(response.read()) == {}  # full success: no partialSuccess
    signal = IngestedSignal.objects.get()
    assert (signal.trace_id, signal.span_id) == (
        "5b8efff798038103d269b633813fc60c",
        "eee19b7ec3c1b174",
    )
    assert (signal.exception_type, signal.service) == ("KeyError", "shop-api")
    assert SECRET not in database_text()
