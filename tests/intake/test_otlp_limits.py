"""Every stored text of a signal at its limit and one past it (``FIELD_LIMITS``): the export is
taken whole, the field is stored whole or cut to its column, and the export's other records are
stored beside it. On PostgreSQL, which refuses a text longer than its column, a field cut
longer than its column used to lose the whole export to an HTML 500 page."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from ephyra.telemetry import FIELD_LIMITS, parse_logs
from intake.otlp.models import IngestedSignal
from intake.otlp.tokens import token_create
from ledger.models import InboundEvent
from tests.intake.test_otlp_refusals import PROTOBUF, post

RESOURCE = {
    "service": "service.name",
    "service_version": "service.version",
    "environment": "deployment.environment.name",
}


def attr(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def resource_logs(attributes: dict[str, str], resource: dict[str, str]) -> ResourceLogs:
    record = LogRecord(
        time_unix_nano=1_700_000_000_000_000_000,
        severity_number=17,
        attributes=[attr(k, v) for k, v in attributes.items()],
    )
    return ResourceLogs(
        resource=Resource(attributes=[attr(k, v) for k, v in resource.items()]),
        scope_logs=[ScopeLogs(log_records=[record])],
    )


def frame_trace(function: str) -> str:
    return "\n".join(
        [
            "Traceback (most recent call last):",
            f'  File "/srv/app/shop/cart.py", line 12, in {function}',
            "    return total()",
            "KeyError: 'price'",
        ]
    )


def culprit_prefix() -> str:
    """What the culprit holds before the function's name ("<path> in ")."""
    body = ExportLogsServiceRequest(
        resource_logs=[resource_logs({"exception.stacktrace": frame_trace("f")}, {})]
    ).SerializeToString()
    return parse_logs(body, PROTOBUF).candidates[0].culprit[:-1]


def record_with(field: str, text: str) -> ResourceLogs:
    """An error log record whose stored ``field`` is made of ``text`` (when nothing cuts it)."""
    if field in RESOURCE:
        return resource_logs({"exception.type": "KeyError"}, {RESOURCE[field]: text})
    if field == "exception_type":
        return resource_logs({"exception.type": text, "exception.message": "boom"}, {})
    if field in {"message", "title"}:  # with no type, the title is the message's first line
        return resource_logs({"exception.message": text}, {})
    assert field == "culprit"
    function = text[len(culprit_prefix()) :]
    return resource_logs({"exception.stacktrace": frame_trace(function)}, {})


def text_of(field: str, length: int) -> str:
    if field == "culprit":
        prefix = culprit_prefix()
        return prefix + "f" * (length - len(prefix))
    return "x" * length


@pytest.fixture
def token(workspace) -> str:
    return token_create(workspace, name="limits")[1]


def test_the_limits_name_every_text_column_ingest_fills():
    columns = {
        f.name
        for f in IngestedSignal._meta.concrete_fields
        if f.get_internal_type() in {"CharField", "TextField"}
    }
    derived = {"signal_id", "quest_id", "event", "parent", "source", "severity", "fingerprint"}
    assert columns - derived == {*FIELD_LIMITS, "trace_id", "span_id"}  # ids: fixed lengths
    for name, limit in FIELD_LIMITS.items():
        assert IngestedSignal._meta.get_field(name).max_length == limit


@pytest.mark.parametrize("field", sorted(FIELD_LIMITS))
@pytest.mark.parametrize("past", [0, 1], ids=["at-the-limit", "one-past-it"])
def test_a_field_at_or_past_its_limit_is_stored_cut_to_its_column(client, token, field, past):
    limit = FIELD_LIMITS[field]
    text = text_of(field, limit + past)
    other = resource_logs({"exception.type": "ValueError", "exception.message": "other"}, {})
    body = ExportLogsServiceRequest(resource_logs=[record_with(field, text), other])

    response = post(client, body.SerializeToString(), token=token)

    assert response.status_code == 200, response.content
    long, short = IngestedSignal.objects.order_by("pk")
    stored = getattr(long, field)
    assert len(stored) == limit
    assert stored == (text if not past else text[: limit - 1] + "…")
    assert (short.exception_type, short.message) == ("ValueError", "other")
    assert InboundEvent.objects.count() == 2  # both quests opened


def test_a_title_that_redaction_lengthens_is_still_cut_to_its_column(client, token):
    # The title is cut, then redacted again (a type and a message's first line joined may
    # form a secret); each placeholder here is longer than the secret it replaces.
    message = "password=x " * 40
    body = ExportLogsServiceRequest(resource_logs=[record_with("title", message)])
    response = post(client, body.SerializeToString(), token=token)
    assert response.status_code == 200, response.content
    title = IngestedSignal.objects.get().title
    assert len(title) <= FIELD_LIMITS["title"]
    assert title.startswith("password=[redacted:secret] password=[redacted:secret]")
    assert title.endswith("…") and "=x" not in title
