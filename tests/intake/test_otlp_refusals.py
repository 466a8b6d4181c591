"""Every refusal of /v1/logs and /v1/traces: the exact status, a google.rpc.Status body in the
request's content type, and nothing stored."""

from __future__ import annotations

import gzip
import json
import logging
import zlib

import pytest
from django.db import DataError, InterfaceError, OperationalError, connection
from django.test import Client
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

from intake.otlp.models import IngestedSignal
from intake.otlp.tokens import token_create
from ledger.models import InboundEvent

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TRACE = """Traceback (most recent call last):
  File "/srv/app/shop/cart.py", line 12, in total
    return sum(item["price"] for item in items)
KeyError: 'price'"""


def error_log(message: str = "KeyError: 'price'") -> bytes:
    def attr(key: str, value: str) -> KeyValue:
        return KeyValue(key=key, value=AnyValue(string_value=value))

    record = LogRecord(
        time_unix_nano=1_700_000_000_000_000_000,
        severity_number=17,
        severity_text="ERROR",
        body=AnyValue(string_value=message),
        attributes=[
            attr("exception.type", "KeyError"),
            attr("exception.message", message),
            attr("exception.stacktrace", TRACE),
        ],
    )
    request = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[record])])]
    )
    return request.SerializeToString()


@pytest.fixture
def token(workspace) -> str:
    return token_create(workspace, name="tests")[1]


def post(client, body: bytes, *, token: str | None, path="/v1/logs", content_type=PROTOBUF, **h):
    headers = {"Content-Type": content_type, **h}  # the test client drops it on empty bodies
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return client.post(path, data=body, content_type=content_type, headers=headers)


def counts() -> tuple[int, int]:
    return IngestedSignal.objects.count(), InboundEvent.objects.count()


def status_of(response) -> Status:
    if response["Content-Type"].startswith(JSON):
        return Status(**json.loads(response.content))
    return Status.FromString(response.content)


def test_an_authorised_error_log_is_stored_and_answered_with_an_empty_response(client, token):
    response = post(client, error_log(), token=token)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == PROTOBUF
    answer = ExportLogsServiceResponse.FromString(response.content)
    assert not answer.HasField("partial_success")
    assert counts() == (1, 1)


@pytest.mark.parametrize("header", [None, "Bearer wrong-token-value", "Basic dXNlcjpwYXNz"])
def test_a_missing_or_wrong_token_is_401_and_stores_nothing(client, token, header):
    headers = {"Authorization": header} if header else {}
    response = client.post("/v1/logs", data=error_log(), content_type=PROTOBUF, headers=headers)
    assert response.status_code == 401
    assert response["Content-Type"] == PROTOBUF
    assert status_of(response).code == 16
    assert "Bearer" in status_of(response).message
    assert counts() == (0, 0)


def test_a_401_speaks_json_to_a_json_sender(client, token):
    response = post(client, b"{}", token=None, content_type=JSON)
    assert response.status_code == 401
    assert response["Content-Type"] == JSON
    assert json.loads(response.content)["code"] == 16


def test_the_token_is_checked_before_the_body_is_read(client, token):
    # A body the parser would refuse (400) and a size over the cap (413) both answer 401.
    assert post(client, b"\xff\xff", token="nope").status_code == 401
    huge = b"\0" * (5 * 1024 * 1024)
    assert post(client, huge, token="nope").status_code == 401


@pytest.mark.parametrize("method", ["get", "put", "delete", "patch"])
def test_another_method_is_405_with_allow_post(client, token, method):
    response = getattr(client, method)("/v1/traces", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert status_of(response).message == "only POST is allowed"
    assert counts() == (0, 0)


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", ""])
def test_a_content_type_otlp_does_not_define_is_415(client, token, content_type):
    response = post(client, error_log(), token=token, content_type=content_type)
    assert response.status_code == 415
    assert "unsupported content type" in status_of(response).message
    assert counts() == (0, 0)


def test_malformed_protobuf_is_400_with_a_status(client, token):
    response = post(client, b"\x0a\xff\xff\xff", token=token)
    assert response.status_code == 400
    assert response["Content-Type"] == PROTOBUF
    status = status_of(response)
    assert status.code == 3 and status.message.startswith("malformed protobuf")
    assert counts() == (0, 0)


def test_malformed_json_is_400_with_a_json_status(client, token):
    response = post(client, b'{"resourceLogs": [', token=token, content_type=JSON)
    assert response.status_code == 400
    assert response["Content-Type"] == JSON
    assert json.loads(response.content)["message"].startswith("malformed JSON")
    assert counts() == (0, 0)


def test_a_gzip_header_on_plain_bytes_is_400(client, token):
    response = post(client, error_log(), token=token, **{"Content-Encoding": "gzip"})
    assert response.status_code == 400
    assert status_of(response).message.startswith("malformed gzip body")
    assert counts() == (0, 0)


def test_a_gzipped_export_is_taken(client, token):
    body = gzip.compress(error_log())
    response = post(client, body, token=token, **{"Content-Encoding": "gzip"})
    assert response.status_code == 200
    assert counts() == (1, 1)


def test_a_decompression_bomb_is_413_although_its_compressed_size_is_small(client, token, settings):
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))
    assert len(bomb) < settings.EPHYRA_OTLP_MAX_BYTES
    response = post(client, bomb, token=token, **{"Content-Encoding": "gzip"})
    assert response.status_code == 413
    assert "inflates past" in status_of(response).message
    assert counts() == (0, 0)


def test_an_oversized_body_is_413(client, token, settings):
    settings.EPHYRA_OTLP_MAX_BYTES = 2048
    response = post(client, error_log("x" * 4096), token=token)
    assert response.status_code == 413
    assert "over the 2048-byte limit" in status_of(response).message
    assert counts() == (0, 0)


def test_an_empty_protobuf_body_is_a_valid_empty_export(client, token):
    # OTLP: an ExportLogsServiceRequest with no records is zero bytes on the wire.
    response = post(client, b"", token=token)
    assert response.status_code == 200
    assert response.content == b""
    assert counts() == (0, 0)


def test_an_empty_json_body_is_not_json(client, token):
    response = post(client, b"", token=token, content_type=JSON)
    assert response.status_code == 400
    assert counts() == (0, 0)


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("could not connect to server"),
        InterfaceError("connection already closed"),  # the server restarted under the pool
    ],
)
def test_an_unavailable_database_is_503_with_retry_after(client, token, error):
    def unavailable(execute, sql, params, many, context):
        if "ingested_signal" in sql.lower() or "intake_ingestedsignal" in sql.lower():
            raise error
        return execute(sql, params, many, context)

    with connection.execute_wrapper(unavailable):
        response = post(client, error_log(), token=token)
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert status_of(response).code == 14
    assert counts() == (0, 0)


def test_an_unknown_content_encoding_is_415(client, token):
    response = post(client, error_log(), token=token, **{"Content-Encoding": "br"})
    assert response.status_code == 415
    assert "unsupported content encoding 'br'" in status_of(response).message
    assert counts() == (0, 0)


def as_json(body: bytes, *, integer_enums: bool = True) -> bytes:
    request = ExportLogsServiceRequest.FromString(body)
    return json_format.MessageToJson(request, use_integers_for_enums=integer_enums).encode()


def test_a_deflated_json_export_is_answered_in_json(client, token):
    body = zlib.compress(as_json(error_log()))
    response = post(client, body, token=token, content_type=JSON, **{"Content-Encoding": "deflate"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == JSON
    assert json.loads(response.content) == {}
    assert counts() == (1, 1)


def test_a_record_it_cannot_use_is_a_partial_success_naming_it(client, token):
    # OTLP JSON encodes enums as integers; a severity given by name is the sender's mistake.
    response = post(
        client, as_json(error_log(), integer_enums=False), token=token, content_type=JSON
    )
    assert response.status_code == 200
    partial = json.loads(response.content)["partialSuccess"]
    assert partial["rejectedLogRecords"] == "1"
    assert partial["errorMessage"].startswith("1 of 1 log records rejected: resourceLogs[0]")
    assert counts() == (0, 0)


def test_a_body_over_djangos_upload_cap_but_under_ours_is_taken(client, token, settings):
    body = error_log("KeyError: " + "p" * (1536 * 1024))  # sent twice: body and attribute
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE < len(body) < settings.EPHYRA_OTLP_MAX_BYTES
    response = post(client, body, token=token)
    assert response.status_code == 200
    assert counts() == (1, 1)


AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
GITHUB_TOKEN = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


@pytest.mark.parametrize(
    ("header", "value", "status"),
    [
        ("Content-Type", f"application/{AWS_KEY}", 415),
        ("Content-Type", f"Token {GITHUB_TOKEN}; charset=utf-8", 415),
        ("Content-Encoding", f"gzip {AWS_KEY}", 415),
        ("Content-Encoding", GITHUB_TOKEN, 415),
    ],
)
def test_a_secret_in_a_refused_content_header_is_neither_logged_nor_echoed(
    client, token, caplog, header, value, status
):
    caplog.set_level(logging.DEBUG)
    headers = {"content_type": value} if header == "Content-Type" else {header: value}
    response = post(client, error_log(), token=token, **headers)
    assert response.status_code == status
    message = status_of(response).message
    assert "[redacted:" in message
    for secret in (AWS_KEY, GITHUB_TOKEN, AWS_KEY.lower(), GITHUB_TOKEN.lower()):
        assert secret not in message
        assert secret not in caplog.text
        assert secret.encode() not in response.content
    assert counts() == (0, 0)


def test_a_gzip_body_of_several_members_is_taken_whole(client, token):
    # RFC 1952: a gzip file is a series of members (what `cat a.gz b.gz` makes). Two protobuf
    # messages end to end are one message holding both exports' records.
    body = gzip.compress(error_log("KeyError: 'price'")) + gzip.compress(error_log("Boom"))
    response = post(client, body, token=token, **{"Content-Encoding": "gzip"})
    assert response.status_code == 200, response.content
    assert sorted(IngestedSignal.objects.values_list("message", flat=True)) == [
        "Boom",
        "KeyError: 'price'",
    ]


@pytest.mark.parametrize(
    ("encoding", "compress"), [("gzip", gzip.compress), ("deflate", zlib.compress)]
)
@pytest.mark.parametrize("garbage", [b"garbage", b"\0", b"\x1f\x8b\x08junk"])
def test_bytes_after_the_compressed_stream_are_400(client, token, encoding, compress, garbage):
    body = compress(error_log()) + garbage
    response = post(client, body, token=token, **{"Content-Encoding": encoding})
    assert response.status_code == 400
    assert status_of(response).message.startswith(f"malformed {encoding} body")
    assert counts() == (0, 0)


def test_the_size_limit_counts_every_gzip_member(client, token, settings):
    member = error_log("x" * 3000)
    settings.EPHYRA_OTLP_MAX_BYTES = len(member) + 1024
    body = gzip.compress(member) * 2
    assert len(body) < settings.EPHYRA_OTLP_MAX_BYTES
    response = post(client, body, token=token, **{"Content-Encoding": "gzip"})
    assert response.status_code == 413
    assert "inflates past" in status_of(response).message
    assert counts() == (0, 0)


@pytest.mark.parametrize("content_type", [PROTOBUF, JSON])
def test_an_unexpected_server_error_is_a_500_with_a_status_not_an_html_page(
    token, content_type, caplog
):
    def broken(execute, sql, params, many, context):
        if "intake_ingestedsignal" in sql.lower():
            raise DataError("value too long for type character varying(1000)")
        return execute(sql, params, many, context)

    body = error_log() if content_type == PROTOBUF else as_json(error_log())
    client = Client(raise_request_exception=False)  # what a sender sees, not the test's raise
    with connection.execute_wrapper(broken):
        response = post(client, body, token=token, content_type=content_type)
    assert response.status_code == 500
    assert response["Content-Type"] == content_type
    status = status_of(response)
    assert status.code == 13  # INTERNAL
    assert status.message == "internal error: the export was not stored"
    assert "value too long" in caplog.text  # for the operator, not the sender
    assert counts() == (0, 0)


@pytest.mark.parametrize("path", ["/v1/metrics", "/v1/profiles", "/v1/logs/extra"])
def test_another_otlp_path_is_a_404_status_not_an_html_page(client, token, path):
    response = post(client, error_log(), token=token, path=path)
    assert response.status_code == 404
    assert response["Content-Type"] == PROTOBUF
    status = status_of(response)
    assert status.code == 5  # NOT_FOUND
    assert status.message.startswith("Ephyra receives only /v1/logs and /v1/traces")
    assert counts() == (0, 0)
