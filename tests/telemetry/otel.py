"""OTLP requests built the way applications build them: the OpenTelemetry SDK, its in-memory
exporters and the OTLP exporter's own protobuf encoders. JSON is the same message through
protobuf's JSON mapping, with ids turned to hex as the OTLP specification requires."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.common._internal._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import Logger, LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Tracer, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ephyra.telemetry import IngestOptions

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
# Frame paths relative to the checkout, so fingerprints do not depend on where it lives.
OPTIONS = IngestOptions(path_roots=(str(ROOT),))
RESOURCE = {
    "service.name": "shop",
    "service.version": "1.4.2",
    "deployment.environment.name": "production",
    "host.name": "shop-7d9f8b6c4d-x2x9k",
}
_ID_FIELDS = {"traceId", "spanId", "parentSpanId"}


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def log_request(
    emit: Callable[[Logger], None], resource: dict[str, Any] | None = None
) -> ExportLogsServiceRequest:
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create(resource or RESOURCE))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    emit(provider.get_logger("shop.checkout"))
    provider.shutdown()
    return encode_logs(exporter.get_finished_logs())


def span_request(
    run: Callable[[Tracer], None], resource: dict[str, Any] | None = None
) -> ExportTraceServiceRequest:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(resource or RESOURCE))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run(provider.get_tracer("shop.web"))
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans())


def log_exception(
    error: BaseException, body: Any = "request failed", severity=SeverityNumber.ERROR
) -> ExportLogsServiceRequest:
    return log_request(lambda log: log.emit(severity_number=severity, body=body, exception=error))


def raised(fn: Callable[..., Any], *args: Any) -> BaseException:
    try:
        fn(*args)
    except Exception as error:  # the test wants whatever the code raised
        return error
    raise AssertionError(f"{fn.__name__} did not raise")


def _hex_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex() if k in _ID_FIELDS and isinstance(v, str) else _hex_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


def otlp_json(message: Message) -> dict[str, Any]:
    """OTLP JSON: lowerCamelCase keys, enums as integers, 64-bit integers as strings, hex ids."""
    return _hex_ids(json_format.MessageToDict(message, use_integers_for_enums=True))
