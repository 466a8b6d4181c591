"""The wire around the records: content types, compression, malformed protobuf, responses."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

from ephyra.telemetry import (
    JSON,
    PROTOBUF,
    OtlpDecodeError,
    PayloadTooLarge,
    UnsupportedMediaType,
    decode_logs_request,
    decompress,
    encode_response,
    encode_status,
    media_type,
    parse_logs,
    parse_traces,
)
from tests.telemetry import shop
from tests.telemetry.otel import log_exception, raised


def _request(*records: LogRecord) -> bytes:
    return ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=list(records))])]
    ).SerializeToString()


@pytest.mark.parametrize(
    ("header", "kind"),
    [
        ("application/x-protobuf", "protobuf"),
        ("application/protobuf", "protobuf"),
        ("Application/JSON; charset=utf-8", "json"),
    ],
)
def test_content_types_are_read_without_their_parameters(header, kind):
    assert media_type(header) == kind


@pytest.mark.parametrize("header", ["", "text/plain", "application/grpc", "application/jsonl"])
def test_other_content_types_are_refused_by_name(header):
    with pytest.raises(UnsupportedMediaType, match=r"OTLP/HTTP takes application/x-protobuf"):
        parse_logs(b"{}", header)


@pytest.mark.parametrize(
    "body",
    [b"\x0a\x05abc", b"\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f", b"\x08"],
)
def test_malformed_protobuf_is_a_typed_error_with_a_message(body):
    with pytest.raises(OtlpDecodeError, match=r"^malformed protobuf: ") as caught:
        parse_logs(body, PROTOBUF)
    assert caught.value.message.startswith("malformed protobuf")
    with pytest.raises(OtlpDecodeError):
        decode_logs_request(body)


def test_an_empty_protobuf_body_is_an_empty_request_and_a_full_success():
    result = parse_logs(b"", PROTOBUF)
    assert (result.records, result.candidates, result.rejected) == (0, (), 0)
    assert parse_traces(b"", PROTOBUF).records == 0


def test_protobuf_records_with_ids_of_the_wrong_length_are_rejected():
    body = _request(
        LogRecord(severity_number=17, body={"string_value": "a"}, trace_id=b"\x01" * 5),
        LogRecord(severity_number=17, body={"string_value": "b"}, span_id=b"\x01" * 9),
        LogRecord(severity_number=30, body={"string_value": "c"}),
        LogRecord(severity_number=17, body={"string_value": "d"}, trace_id=b"\x00" * 16),
    )
    result = parse_logs(body, PROTOBUF)
    assert (result.records, result.rejected, len(result.candidates)) == (4, 3, 1)
    assert "trace_id must be 16 bytes, got 5" in result.rejection
    assert "span_id must be 8 bytes, got 9" in result.rejection
    assert "severity_number 30 is outside 0-24" in result.rejection
    assert result.candidates[0].trace_id == ""  # all zeros: no trace


def test_partial_success_is_reported_in_the_requests_own_encoding():
    body = _request(
        LogRecord(severity_number=17, body={"string_value": "ok"}),
        LogRecord(severity_number=17, trace_id=b"short"),
    )
    result = parse_logs(body, PROTOBUF)
    response = ExportLogsServiceResponse.FromString(encode_response(result, PROTOBUF))
    assert response.partial_success.rejected_log_records == 1
    assert response.partial_success.error_message == result.rejection
    assert result.rejection.startswith("1 of 2 log records rejected: ")
    as_json = json.loads(encode_response(result, JSON))
    assert as_json == {
        "partialSuccess": {"rejectedLogRecords": "1", "errorMessage": result.rejection}
    }
    parsed = json_format.Parse(encode_response(result, JSON), ExportLogsServiceResponse())
    assert parsed == response


def test_a_traces_response_counts_spans():
    result = parse_traces(b'{"resourceSpans": [{"scopeSpans": [{"spans": [{}]}]}]}', JSON)
    response = ExportTraceServiceResponse.FromString(encode_response(result, PROTOBUF))
    assert response.partial_success.rejected_spans == 1
    assert "1 of 1 spans rejected" in response.partial_success.error_message


def test_a_failure_status_decodes_as_google_rpc_status():
    body = encode_status("malformed protobuf: Wire format was corrupt", PROTOBUF)
    status = status_pb2.Status.FromString(body)
    assert (status.code, status.message) == (3, "malformed protobuf: Wire format was corrupt")
    long = encode_status("é" * 300, "text/plain")  # an unknown type answers in protobuf
    assert status_pb2.Status.FromString(long).message == "é" * 300
    assert json.loads(encode_status("bad", JSON)) == {"code": 3, "message": "bad"}


def test_gzip_and_deflate_bodies_are_inflated_within_the_limit():
    body = log_exception(raised(shop.checkout, [])).SerializeToString()
    assert decompress(gzip.compress(body), "gzip") == body
    assert decompress(zlib.compress(body), "Deflate") == body
    assert decompress(body, "") == body and decompress(body, "identity") == body
    [c] = parse_logs(decompress(gzip.compress(body), "gzip"), PROTOBUF).candidates
    assert c.exception_type == "ZeroDivisionError"


def test_a_compression_bomb_stops_at_the_limit():
    bomb = gzip.compress(b"\0" * 5_000_000)
    with pytest.raises(PayloadTooLarge, match="inflates past the 1000000-byte limit"):
        decompress(bomb, "gzip", limit=1_000_000)
    with pytest.raises(PayloadTooLarge, match="over the 10-byte limit"):
        decompress(b"x" * 11, "", limit=10)


@pytest.mark.parametrize(
    ("body", "encoding", "error", "text"),
    [
        (b"not gzip", "gzip", OtlpDecodeError, "malformed gzip body"),
        (gzip.compress(b"x" * 100, mtime=0)[:-12], "gzip", OtlpDecodeError, "truncated stream"),
        (b"x", "br", UnsupportedMediaType, "unsupported content encoding 'br'"),
    ],
)
def test_bad_compression_is_a_typed_error(body, encoding, error, text):
    with pytest.raises(error, match=text):
        decompress(body, encoding)
