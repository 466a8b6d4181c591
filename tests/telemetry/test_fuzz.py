"""Whatever arrives, the only exception that leaves is the typed decode error."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ephyra.telemetry import JSON, PROTOBUF, OtlpDecodeError, parse_logs, parse_traces
from tests.telemetry import shop
from tests.telemetry.otel import log_exception, raised, span_request

PARSERS = (parse_logs, parse_traces)
VALID_LOGS = log_exception(raised(shop.checkout, [])).SerializeToString()


def _only_typed_errors(body: bytes, content_type: str) -> None:
    for parse in PARSERS:
        try:
            result = parse(body, content_type)
        except OtlpDecodeError as error:
            assert error.message
        else:
            assert result.records >= result.dropped + result.rejected


@given(st.binary(max_size=4096))
def test_random_bytes_as_either_content_type(body):
    _only_typed_errors(body, PROTOBUF)
    _only_typed_errors(body, JSON)


@given(st.data())
def test_a_valid_protobuf_body_with_bytes_flipped(data):
    body = bytearray(VALID_LOGS)
    for _ in range(data.draw(st.integers(1, 8))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    _only_typed_errors(bytes(body), PROTOBUF)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=30,
)
_KEYS = st.sampled_from(
    [
        "resourceLogs", "resourceSpans", "resource", "attributes", "scopeLogs", "scopeSpans",
        "scope", "name", "logRecords", "spans", "events", "severityNumber", "severityText",
        "traceId", "spanId", "timeUnixNano", "observedTimeUnixNano", "endTimeUnixNano", "body",
        "key", "value", "stringValue", "intValue", "doubleValue", "boolValue", "bytesValue",
        "arrayValue", "kvlistValue", "values",
    ]
)  # fmt: skip
_OTLP_SHAPED = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**65), 2**65)
    | st.sampled_from(["exception", "ERROR", "5b8efff798038103d269b633813fc60c", "17", "NaN"])
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=5),
    max_leaves=40,
)


@given(_JSON)
def test_random_json_values(value):
    _only_typed_errors(json.dumps(value).encode(), JSON)


@settings(max_examples=300)
@given(_OTLP_SHAPED)
def test_json_made_of_otlp_words_in_random_places(value):
    _only_typed_errors(json.dumps(value).encode(), JSON)
    _only_typed_errors(json.dumps({"resourceLogs": [value]}).encode(), JSON)
    _only_typed_errors(json.dumps({"resourceSpans": [{"scopeSpans": [value]}]}).encode(), JSON)


def test_a_valid_trace_request_survives_the_same_harness():
    request = span_request(lambda tracer: tracer.start_span("x").end())
    _only_typed_errors(request.SerializeToString(), PROTOBUF)
