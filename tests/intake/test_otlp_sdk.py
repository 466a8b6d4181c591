"""The OpenTelemetry Python SDK, pointed at a real Ephyra server, as an application would be."""

from __future__ import annotations

import logging
import warnings

import pytest
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from intake.otlp_models import IngestedSignal
from intake.tokens import token_create
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


@pytest.fixture
def token(workspace) -> str:
    return token_create(workspace, name="sdk")[1]


def send_log(url: str, headers: dict[str, str]) -> None:
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{url}/v1/logs", headers=headers))
    )
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


def send_span(url: str, headers: dict[str, str]) -> None:
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{url}/v1/traces", headers=headers))
    )
    tracer = provider.get_tracer("shop.checkout")
    with tracer.start_as_current_span("POST /checkout") as span:
        span.record_exception(checkout())
    provider.shutdown()


def test_an_sdk_logging_an_exception_opens_a_redacted_fingerprinted_quest(live_server, token):
    send_log(live_server.url, {"Authorization": f"Bearer {token}"})

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


def test_a_span_exception_of_the_same_error_merges_into_the_open_quest(live_server, token):
    headers = {"Authorization": f"Bearer {token}"}
    send_log(live_server.url, headers)
    send_span(live_server.url, headers)

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


def test_an_sdk_with_a_wrong_token_stores_nothing(live_server, token):
    send_log(live_server.url, {"Authorization": "Bearer not-the-token"})
    send_span(live_server.url, {"Authorization": "Bearer not-the-token"})
    assert IngestedSignal.objects.count() == 0
    assert InboundEvent.objects.count() == 0
