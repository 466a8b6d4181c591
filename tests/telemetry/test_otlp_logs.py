"""OTLP logs from the real SDK, as protobuf and as JSON, through ``parse_logs``."""

from __future__ import annotations

import json

import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from ephyra.core.states import Severity
from ephyra.telemetry import JSON, PROTOBUF, encode_response, parse_logs
from tests.telemetry import shop
from tests.telemetry.otel import OPTIONS, log_exception, log_request, otlp_json, raised

TRACE_ID = 0x5B8EFFF798038103D269B633813FC60C
SPAN_ID = 0xEEE19B7EC3C1B174


def both(request: ExportLogsServiceRequest):
    """The same request parsed from protobuf and from OTLP JSON: the two must agree."""
    from_pb = parse_logs(request.SerializeToString(), PROTOBUF, options=OPTIONS)
    from_json = parse_logs(json.dumps(otlp_json(request)).encode(), JSON, options=OPTIONS)
    assert from_pb == from_json
    return from_pb


def test_a_logged_python_exception_becomes_one_fingerprinted_candidate():
    context = set_span_in_context(
        NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1)))
    )

    def emit(log):
        log.emit(
            severity_number=SeverityNumber.ERROR,
            body="checkout failed",
            exception=raised(shop.checkout, []),
            context=context,
        )

    result = both(log_request(emit))
    assert (result.records, result.dropped, result.rejected, result.rejection) == (1, 0, 0, "")
    [c] = result.candidates
    assert c.source == "log" and c.severity is Severity.ERROR
    assert c.title == "ZeroDivisionError: division by zero"
    assert c.exception_type == "ZeroDivisionError" and c.message == "division by zero"
    assert c.body == "checkout failed"
    assert c.language == "python"
    assert c.culprit == "tests/telemetry/shop.py in average_price"
    assert c.paths == ("tests/telemetry/shop.py", "tests/telemetry/otel.py")  # innermost first
    assert [f.function for f in c.frames if f.in_app][:2] == ["average_price", "checkout"]
    assert c.fingerprint.startswith("v1:") and c.fingerprint_version == 1
    assert (c.service, c.service_version, c.environment) == ("shop", "1.4.2", "production")
    assert c.logger == "shop.checkout"
    assert c.trace_id == "5b8efff798038103d269b633813fc60c" and c.span_id == "eee19b7ec3c1b174"
    assert c.at is not None and c.time_unix_nano > 0
    assert c.resource["host.name"] == "shop-7d9f8b6c4d-x2x9k"


def test_info_and_warning_records_are_accepted_and_dropped_not_rejected():
    def emit(log):
        log.emit(severity_number=SeverityNumber.INFO, body="ok")
        log.emit(
            severity_number=SeverityNumber.WARN, body="slow", exception=raised(shop.lookup, "x")
        )
        log.emit(severity_number=SeverityNumber.ERROR, body="payment provider timed out")

    result = both(log_request(emit))
    assert (result.records, result.dropped, result.rejected) == (3, 2, 0)
    [c] = result.candidates
    assert c.title == "payment provider timed out" and c.exception_type == "" and not c.frames
    assert result.accepted == 3


@pytest.mark.parametrize(
    ("number", "text", "severity"),
    [
        (SeverityNumber.ERROR, "", Severity.ERROR),
        (SeverityNumber.ERROR4, "", Severity.ERROR),
        (SeverityNumber.FATAL, "", Severity.FATAL),
        (SeverityNumber.FATAL4, "whatever", Severity.FATAL),
        (SeverityNumber.UNSPECIFIED, "ERROR", Severity.ERROR),
        (SeverityNumber.UNSPECIFIED, "error", Severity.ERROR),
        (SeverityNumber.UNSPECIFIED, "CRITICAL", Severity.FATAL),
        (SeverityNumber.UNSPECIFIED, "Fatal", Severity.FATAL),
        (SeverityNumber.UNSPECIFIED, "WARN", None),
        (SeverityNumber.WARN4, "ERROR", None),  # the number, once set, decides
        (SeverityNumber.UNSPECIFIED, "", None),
    ],
)
def test_severity_number_decides_and_text_only_counts_when_the_number_is_unset(
    number, text, severity
):
    request = log_request(
        lambda log: log.emit(severity_number=number, severity_text=text, body="boom")
    )
    result = both(request)
    assert [c.severity for c in result.candidates] == ([severity] if severity else [])
    assert result.dropped == (0 if severity else 1)


def test_a_secret_in_an_exception_message_never_reaches_the_candidate():
    error = raised(shop.leak, "Tr0ub4dor&3")
    result = both(log_exception(error, body={"user": "alice@example.com", "password": "hunter2"}))
    [c] = result.candidates
    for text in c.texts():
        assert "Tr0ub4dor" not in text and "hunter2" not in text
        assert "alice@example.com" not in text and "10.1.2.3" not in text
    assert "[redacted:url-credentials]" in c.message and "[redacted:ipv4]" in c.message
    assert c.body == '{"user":"[redacted:email]","password":"[redacted:secret]"}'


def test_attributes_named_like_secrets_are_replaced_whole():
    def emit(log):
        log.emit(
            severity_number=SeverityNumber.ERROR,
            body="login failed",
            attributes={
                "http.request.header.authorization": "Basic c2hvcDpodW50ZXIy",
                "db.password": "plain words here",
                "user.session_id": 12345,
                "http.route": "/login",
                "retry.count": 3,
                "feature.flags": ["a", "b"],
            },
        )

    [c] = both(log_request(emit)).candidates
    assert c.attributes == {
        "http.request.header.authorization": "[redacted:secret]",
        "db.password": "[redacted:secret]",
        "user.session_id": "[redacted:secret]",
        "http.route": "/login",
        "retry.count": "3",
        "feature.flags": '["a","b"]',
    }


def test_a_traceback_logged_as_plain_text_is_still_parsed():
    error = raised(shop.checkout, [])
    import traceback

    text = "".join(traceback.format_exception(error))
    [c] = both(
        log_request(lambda log: log.emit(severity_number=SeverityNumber.ERROR, body=text))
    ).candidates
    assert c.exception_type == "ZeroDivisionError" and c.message == "division by zero"
    assert c.culprit == "tests/telemetry/shop.py in average_price"
    assert c.stacktrace.startswith("Traceback (most recent call last):")


def test_a_full_success_response_has_no_partial_success_in_either_encoding():
    result = both(log_exception(raised(shop.checkout, [])))
    assert encode_response(result, PROTOBUF) == b""
    assert ExportLogsServiceResponse.FromString(b"").HasField("partial_success") is False
    assert json.loads(encode_response(result, "application/json; charset=utf-8")) == {}




def logged_through_the_sdk_handler(fail) -> ExportLogsServiceRequest:
    """What an application's ``logger.exception`` sends through the SDK's logging handler when
    ``fail()`` raises."""
    import logging
    import warnings

    from opentelemetry.exporter.otlp.proto.common._internal._log_encoder import encode_logs
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    with warnings.catch_warnings():  # the SDK's handler is deprecated, and what apps still use
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = LoggingHandler(logger_provider=provider)
    logger = logging.getLogger("shop.names")
    logger.addHandler(handler)
    try:
        fail()
    except Exception:
        logger.exception("naming failed")
    finally:
        logger.removeHandler(handler)
    provider.shutdown()
    return encode_logs(exporter.get_finished_logs())


def test_an_exception_with_several_arguments_keeps_its_whole_message_not_the_first_argument():
    # The SDK's logging handler sends str(args[0]) as exception.message: 'ascii' for this
    # error. Its traceback's last line has the message Python prints, as a test failure shows.
    def fail():
        "\u00e4l\u00e4m\u00f6l\u00f6".encode("ascii")

    [c] = both(logged_through_the_sdk_handler(fail)).candidates
    assert c.exception_type == "UnicodeEncodeError"
    assert c.message == (
        "'ascii' codec can't encode character '\\xe4' in position 0: ordinal not in range(128)"
    )
    assert c.title.startswith("UnicodeEncodeError: 'ascii' codec can't encode")


def test_an_exception_without_a_message_is_not_given_the_logs_body_as_one():
    # A bare StopIteration has no message; the body is what the application said around it.
    def fail():
        next(iter([]))

    [c] = both(logged_through_the_sdk_handler(fail)).candidates
    assert (c.exception_type, c.message, c.title) == ("StopIteration", "", "StopIteration")
    assert c.body == "naming failed"
