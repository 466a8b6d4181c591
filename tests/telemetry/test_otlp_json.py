"""OTLP JSON exactly as the specification has it: shapes from its examples, its deviations from
protobuf's JSON mapping, and what happens to a record with a wrong field."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ephyra.telemetry import JSON, OtlpDecodeError, otlp_json, parse_logs, parse_traces
from tests.telemetry.otel import fixture

# The specification's examples/logs.json record, as an error with an exception.
SPEC_LOGS: dict[str, Any] = {
    "resourceLogs": [
        {
            "resource": {
                "attributes": [{"key": "service.name", "value": {"stringValue": "my.service"}}]
            },
            "scopeLogs": [
                {
                    "scope": {"name": "my.library", "version": "1.0.0"},
                    "logRecords": [
                        {
                            "timeUnixNano": "1544712660300000000",
                            "observedTimeUnixNano": "1544712660300000000",
                            "severityNumber": 17,
                            "severityText": "Error",
                            "traceId": "5B8EFFF798038103D269B633813FC60C",
                            "spanId": "EEE19B7EC3C1B174",
                            "body": {"stringValue": "Example log record"},
                            "attributes": [
                                {"key": "exception.type", "value": {"stringValue": "TypeError"}},
                                {
                                    "key": "exception.message",
                                    "value": {"stringValue": "x is undefined"},
                                },
                                {
                                    "key": "exception.stacktrace",
                                    "value": {"stringValue": fixture("node_v8.txt")},
                                },
                                {"key": "int.attribute", "value": {"intValue": "10"}},
                                {"key": "double.attribute", "value": {"doubleValue": 637.704}},
                                {"key": "boolean.attribute", "value": {"boolValue": True}},
                                {
                                    "key": "array.attribute",
                                    "value": {
                                        "arrayValue": {
                                            "values": [
                                                {"stringValue": "many"},
                                                {"stringValue": "values"},
                                            ]
                                        }
                                    },
                                },
                                {
                                    "key": "map.attribute",
                                    "value": {
                                        "kvlistValue": {
                                            "values": [
                                                {
                                                    "key": "some.map.key",
                                                    "value": {"stringValue": "some value"},
                                                },
                                                {
                                                    "key": "api_key",
                                                    "value": {"stringValue": "plain"},
                                                },
                                            ]
                                        }
                                    },
                                },
                                {"key": "bytes.attribute", "value": {"bytesValue": "aGVsbG8="}},
                            ],
                        }
                    ],
                }
            ],
        }
    ]
}


def logs(data: Any) -> Any:
    return parse_logs(json.dumps(data).encode(), JSON)


def record(data: dict[str, Any]) -> dict[str, Any]:
    return data["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]


def test_the_specifications_example_shape_reads_as_documented():
    result = logs(SPEC_LOGS)
    [c] = result.candidates
    assert c.trace_id == "5b8efff798038103d269b633813fc60c" and c.span_id == "eee19b7ec3c1b174"
    assert c.time_unix_nano == 1544712660300000000
    assert c.service == "my.service" and c.logger == "my.library"
    assert c.title == "TypeError: x is undefined" and c.language == "javascript"
    assert c.body == "Example log record"
    assert c.attributes == {
        "int.attribute": "10",
        "double.attribute": "637.704",
        "boolean.attribute": "true",
        "array.attribute": '["many","values"]',
        "map.attribute": '{"some.map.key":"some value","api_key":"[redacted:secret]"}',
        "bytes.attribute": "aGVsbG8=",
    }


def test_the_specifications_plain_examples_carry_no_errors_and_are_dropped():
    info = copy.deepcopy(SPEC_LOGS)
    record(info).pop("severityNumber")
    record(info)["severityText"] = "Information"
    assert (logs(info).records, logs(info).dropped, logs(info).candidates) == (1, 1, ())
    spans = {
        "resourceSpans": [
            {
                "resource": {"attributes": []},
                "scopeSpans": [
                    {
                        "scope": {"name": "my.library"},
                        "spans": [
                            {
                                "traceId": "5B8EFFF798038103D269B633813FC60C",
                                "spanId": "EEE19B7EC3C1B174",
                                "parentSpanId": "EEE19B7EC3C1B173",
                                "name": "I'm a server span",
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": "1544712661000000000",
                                "kind": 2,
                            }
                        ],
                    }
                ],
            }
        ]
    }
    result = parse_traces(json.dumps(spans).encode(), JSON)
    assert (result.records, result.dropped, result.rejected) == (1, 1, 0)


def test_64_bit_integers_may_be_numbers_or_strings_and_nulls_are_defaults():
    data = copy.deepcopy(SPEC_LOGS)
    record(data)["timeUnixNano"] = 1544712660300000000
    record(data)["spanId"] = None
    record(data)["flags"] = None
    [c] = logs(data).candidates
    assert c.time_unix_nano == 1544712660300000000 and c.span_id == ""
    record(data)["timeUnixNano"] = None
    [c] = logs(data).candidates
    assert c.time_unix_nano == 1544712660300000000  # the observed time, then


def test_unknown_and_snake_case_fields_are_ignored_as_the_spec_requires():
    data = copy.deepcopy(SPEC_LOGS)
    record(data)["somethingNew"] = {"nested": [1, 2]}
    record(data)["severity_number"] = 1  # not a valid key in OTLP JSON: ignored, not read
    data["resourceLogs"][0]["schemaUrl"] = "https://opentelemetry.io/schemas/1.26.0"
    [c] = logs(data).candidates
    assert c.severity.value == "error"
    snake = copy.deepcopy(SPEC_LOGS)
    record(snake)["severity_number"] = record(snake).pop("severityNumber")
    record(snake)["severityText"] = ""
    result = logs(snake)
    assert result.dropped == 1 and not result.candidates  # no severityNumber read at all


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("severityNumber", "SEVERITY_NUMBER_ERROR", "severityNumber must be an integer"),
        ("severityNumber", "17", "severityNumber must be an integer"),
        ("severityNumber", True, "severityNumber must be an integer"),
        ("severityNumber", 99, "severityNumber 99 is outside 0-24"),
        ("traceId", "W47/95gDgQPSabYzgT/GDA==", "traceId must be 32 hex digits"),
        ("traceId", "5b8e", "traceId must be 32 hex digits, got 4 characters"),
        ("spanId", 12, "spanId must be a hex string, got a number"),
        ("timeUnixNano", "yesterday", "timeUnixNano must be an unsigned 64-bit integer"),
        ("timeUnixNano", -1, "timeUnixNano must be an unsigned 64-bit integer"),
        ("severityText", ["ERROR"], "severityText must be a string, got an array"),
        ("attributes", {"a": 1}, "attributes must be an array of key/value objects"),
        ("body", "plain", "an AnyValue must be an object, got a string"),
        ("body", {"stringValue": "a", "intValue": 1}, "sets more than one of its fields"),
        ("body", {"intValue": "1.5"}, "intValue must be a 64-bit integer"),
        ("body", {"bytesValue": "%%%"}, "bytesValue is not valid base64"),
        ("body", {"kvlistValue": {"values": {}}}, "kvlistValue.values must be an array"),
    ],
)
def test_a_record_with_a_wrong_field_is_rejected_alone_with_the_reason(field, value, reason):
    data = copy.deepcopy(SPEC_LOGS)
    good = copy.deepcopy(record(data))
    record(data)[field] = value
    data["resourceLogs"][0]["scopeLogs"][0]["logRecords"].append(good)
    result = logs(data)
    assert (result.records, result.rejected, len(result.candidates)) == (2, 1, 1)
    assert result.rejection.startswith(
        "1 of 2 log records rejected: resourceLogs[0].scopeLogs[0].logRecords[0]: "
    )
    assert reason in result.rejection


def test_an_error_record_with_nothing_to_report_is_rejected():
    data = copy.deepcopy(SPEC_LOGS)
    record(data).pop("body")
    record(data)["attributes"] = []
    result = logs(data)
    assert result.rejected == 1
    assert "an error record with no body and no exception attributes" in result.rejection


def test_the_rejection_message_names_five_reasons_and_counts_the_rest():
    data = copy.deepcopy(SPEC_LOGS)
    bad = copy.deepcopy(record(data))
    bad["traceId"] = "nothex"
    data["resourceLogs"][0]["scopeLogs"][0]["logRecords"] = [bad] * 8
    result = logs(data)
    assert result.rejected == 8 and result.rejection.count("traceId must be") == 5
    assert result.rejection.endswith("; and 3 more")


def test_a_span_must_have_its_ids():
    spans = {
        "resourceSpans": [
            {"scopeSpans": [{"spans": [{"name": "x", "events": [{"name": "exception"}]}]}]}
        ]
    }
    result = parse_traces(json.dumps(spans).encode(), JSON)
    assert result.rejected == 1 and "needs a non-zero traceId and spanId" in result.rejection


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "malformed JSON: Expecting value"),
        (b"{", "malformed JSON"),
        (b"\xff\xfe\x00", "malformed JSON"),
        (b"[]", "an OTLP JSON request must be an object, got an array"),
        (b'{"resourceLogs": {}}', "request.resourceLogs must be an array, got an object"),
        (b'{"resourceLogs": [7]}', "resourceLogs[0] must be an object, got a number"),
        (
            b'{"resourceLogs": [{"scopeLogs": [{"logRecords": "x"}]}]}',
            "resourceLogs[0].scopeLogs[0].logRecords must be an array, got a string",
        ),
        (
            b'{"resourceLogs": [{"resource": {"attributes": 5}}]}',
            "resourceLogs[0].resource: attributes must be an array",
        ),
        (b"[" * 100_000, "malformed JSON"),
    ],
)
def test_a_body_that_is_not_an_otlp_request_is_a_decode_error(body, message):
    with pytest.raises(OtlpDecodeError) as caught:
        parse_logs(body, JSON)
    assert message in str(caught.value) and caught.value.message == str(caught.value)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"resourceLogs": [], "x": 123456789012345678901234567890}',
        b'{"resourceLogs": [], "x": -9223372036854775809}',
        b'{"resourceLogs": [], "x": NaN}',
        b'\xef\xbb\xbf{"resourceLogs": []}',
        b'{"resourceLogs": [], "x": "\\ud800"}',
        b'{"resourceLogs": [], "x": 1e400}',
        b'{"resourceLogs": [], "x": [1,12345678901234567890]}',
        b'{"x":\n\t12345678901234567890, "resourceLogs": []}',
        b'{"resourceLogs": [], "x": -12345678901234567890.5}',
    ],
)
def test_bodies_orjson_would_read_differently_are_read_by_the_standard_library(raw):
    assert otlp_json._fast_load(raw) is None
    assert otlp_json.load(raw) == json.loads(raw)


def test_digits_inside_a_string_do_not_send_a_body_to_the_standard_library():
    # a trace id has twenty decimal digits in a row in about one request of four
    raw = b'{"resourceLogs": [], "traceId": "5b812345678901234567890f", "x": "-123456789"}'
    assert otlp_json._fast_load(raw) == json.loads(raw)


@given(
    st.integers(min_value=0, max_value=10**18),
    st.text(alphabet="0123456789", min_size=1, max_size=40),
    st.sampled_from(["", "e", "E-", "e+"]),
    st.text(alphabet="0123456789", min_size=1, max_size=25),
)
def test_long_fractions_and_exponents_are_read_by_orjson_as_the_standard_library_reads_them(
    whole, fraction, mark, exponent
):
    number = f"{whole}.{fraction}" + (f"{mark}{exponent}" if mark else "")
    raw = f'{{"resourceLogs": [], "x": {number}}}'.encode()
    fast = otlp_json._fast_load(raw)
    assert fast is None or fast == json.loads(raw)


def test_a_plain_body_is_read_the_same_by_both_parsers():
    raw = json.dumps({"resourceLogs": [{"x": [1, 2.5, -0.0, 9223372036854775807, "é\n"]}]})
    assert otlp_json._fast_load(raw.encode()) == json.loads(raw)


@given(
    st.lists(
        st.one_of(
            st.integers(min_value=-(10**25), max_value=10**25),
            st.integers(min_value=-(2**63) - 2, max_value=2**64 + 2),
            st.floats(allow_nan=False, allow_infinity=False),
        ),
        max_size=8,
    )
)
def test_numbers_of_any_width_read_exactly_as_the_standard_library_reads_them(numbers):
    raw = json.dumps({"resourceLogs": [], "x": numbers}).encode()
    loaded = otlp_json.load(raw)["x"]
    assert loaded == json.loads(raw)["x"]
    assert [type(n) for n in loaded] == [type(n) for n in numbers]


def test_rejections_are_named_in_record_order_whatever_made_the_record_unusable():
    data = copy.deepcopy(SPEC_LOGS)
    good = copy.deepcopy(record(data))
    empty = {**good, "attributes": []}  # unusable once decoded: nothing to report
    empty.pop("body")
    wrong = {**good, "traceId": "nothex"}  # unusable while decoding
    data["resourceLogs"][0]["scopeLogs"][0]["logRecords"] = [good, empty, wrong, good, empty]
    result = logs(data)
    assert (result.records, result.rejected, len(result.candidates)) == (5, 3, 2)
    where = "resourceLogs[0].scopeLogs[0].logRecords"
    assert result.rejection == (
        f"3 of 5 log records rejected: {where}[1]: an error record with no body and no "
        f"exception attributes; {where}[2]: traceId must be 32 hex digits, got 6 characters; "
        f"{where}[4]: an error record with no body and no exception attributes"
    )


@pytest.mark.parametrize(
    ("second", "reason"),
    [
        ({"name": "exception", "attributes": []}, "no body and no exception attributes"),
        (
            {"name": "exception", "timeUnixNano": "abc", "attributes": []},
            "no body and no exception attributes",  # the first event's, read before the second
        ),
    ],
)
def test_a_span_is_rejected_for_the_first_of_its_exception_events_that_is_unusable(second, reason):
    first = {"name": "exception", "attributes": []}  # decodes, but has nothing to report
    span = {"traceId": "01" * 16, "spanId": "02" * 8, "name": "x", "events": [first, second]}
    data = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    result = parse_traces(json.dumps(data).encode(), JSON)
    assert (result.records, result.rejected, result.candidates) == (1, 1, ())
    where = "resourceSpans[0].scopeSpans[0].spans[0]"
    assert result.rejection == f"1 of 1 spans rejected: {where}: an error record with {reason}"


def test_a_span_whose_later_event_cannot_be_read_is_rejected_for_it_when_the_first_is_usable():
    first = {
        "name": "exception",
        "attributes": [{"key": "exception.type", "value": {"stringValue": "ValueError"}}],
    }
    second = {"name": "exception", "timeUnixNano": "abc"}
    span = {"traceId": "01" * 16, "spanId": "02" * 8, "name": "x", "events": [first, second]}
    data = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    result = parse_traces(json.dumps(data).encode(), JSON)
    assert (result.rejected, result.candidates) == (1, ())
    assert result.rejection.endswith(
        "spans[0]: timeUnixNano must be an unsigned 64-bit integer, got a string"
    )
