"""OTLP/HTTP requests and responses: logs and traces, binary protobuf and OTLP JSON.

Requests decode with the generated classes of ``opentelemetry-proto`` (protobuf) or with
``otlp_json`` (the JSON mapping, hex ids and integer enums); both hand plain values to
``signals``. A body that cannot be read at all raises ``OtlpDecodeError``; a record inside it
that is unusable (an id of the wrong length, a severity outside 0-24, a value of the wrong
type) is *rejected* and counted for the partial-success response, and the rest go on.
Responses are ``Export*ServiceResponse`` (with ``partial_success`` when anything was rejected)
in the request's own content type; failures are a ``google.rpc.Status``.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any, Literal

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ephyra.core.states import Severity
from ephyra.redaction.redact import redact
from ephyra.telemetry import otlp_json
from ephyra.telemetry.errors import OtlpDecodeError, PayloadTooLarge, UnsupportedMediaType
from ephyra.telemetry.signals import (
    DEFAULT_OPTIONS,
    IngestOptions,
    ParseResult,
    Raw,
    Signal,
    Tally,
    Unusable,
    clean,
    cut,
    log_severity,
    resource_info,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MediaType = Literal["protobuf", "json"]
MAX_DEPTH = 32  # deeper values are cut to "…" (valid OTLP, just not worth reading)
MAX_SHOWN = 100  # characters of a refused header's value quoted back
_FEED = 16 * 1024  # compressed bytes given to the inflater at a time
_GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_MAX_BODY = 16 * 1024 * 1024

_MEDIA_TYPES: dict[str, MediaType] = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",
    "application/json": "json",
}


def shown(header: str) -> str:
    """A header's value as a refusal quotes it (to the sender and in the log): redacted as any
    text is, before anything lowers its case (``akia…`` is no longer an AWS key to the rules),
    and cut, since a header can be kilobytes long."""
    return repr(cut(redact(clean(header)), MAX_SHOWN)) if header else "(none)"


def media_type(content_type: str) -> MediaType:
    """``protobuf`` or ``json`` from a Content-Type header (parameters such as charset ignored)."""
    base = content_type.split(";", 1)[0].strip()
    try:
        return _MEDIA_TYPES[base.lower()]
    except KeyError:
        raise UnsupportedMediaType(
            f"unsupported content type {shown(base)}: OTLP/HTTP takes {PROTOBUF} or {JSON}"
        ) from None


def decompress(body: bytes, content_encoding: str, limit: int = DEFAULT_MAX_BODY) -> bytes:
    """The body with its Content-Encoding (``gzip``, ``deflate`` or none) undone, refusing to
    inflate past ``limit`` bytes. A gzip body is every member of it, one after another (RFC 1952:
    what ``cat a.gz b.gz`` makes), the limit counting them all; bytes after the last member, or
    after a deflate stream, are not part of any and refuse the body."""
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        if len(body) > limit:
            raise PayloadTooLarge(f"body of {len(body)} bytes is over the {limit}-byte limit")
        return body
    if encoding not in ("gzip", "deflate"):
        raise UnsupportedMediaType(
            f"unsupported content encoding {shown(content_encoding.strip())}: use gzip or none"
        )
    try:
        return _inflate(body, encoding, limit)
    except zlib.error as error:
        raise OtlpDecodeError(f"malformed {encoding} body: {error}") from None


def _inflate(body: bytes, encoding: str, limit: int) -> bytes:
    wbits = 31 if encoding == "gzip" else 15
    inflater = zlib.decompressobj(wbits)
    out: list[bytes] = []
    size = pos = 0
    data = b""
    while data or pos < len(body):
        if not data:
            # A slice at a time: what is left after a member (``unused_data``) is a copy, and
            # copying the whole rest of a body once per member is quadratic in small members.
            data, pos = body[pos : pos + _FEED], pos + _FEED
        # At most one byte past the limit: a bomb is refused while inflating, never held whole.
        chunk = inflater.decompress(data, limit - size + 1)
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"body inflates past the {limit}-byte limit")
        out.append(chunk)
        data = inflater.unconsumed_tail
        if inflater.eof:
            data = inflater.unused_data
            if not data and pos >= len(body):
                break
            if encoding != "gzip":
                raise OtlpDecodeError("malformed deflate body: bytes after the end of the stream")
            if (data[:2] + body[pos : pos + 2])[:2] != _GZIP_MAGIC:
                raise OtlpDecodeError("malformed gzip body: bytes after the last member")
            inflater = zlib.decompressobj(wbits)  # the next member
    if not inflater.eof:
        raise OtlpDecodeError(f"malformed {encoding} body: truncated stream")
    return b"".join(out)


def _parse_protobuf(message: type[Message], body: bytes) -> Any:
    try:
        return message.FromString(body)
    except DecodeError as error:
        raise OtlpDecodeError(f"malformed protobuf: {error}") from None


def decode_logs_request(body: bytes) -> ExportLogsServiceRequest:
    """A binary ``ExportLogsServiceRequest``, or ``OtlpDecodeError``."""
    return _parse_protobuf(ExportLogsServiceRequest, body)


def decode_trace_request(body: bytes) -> ExportTraceServiceRequest:
    """A binary ``ExportTraceServiceRequest``, or ``OtlpDecodeError``."""
    return _parse_protobuf(ExportTraceServiceRequest, body)


# -- protobuf → plain values ----------------------------------------------------------------


def _value(v: Any, depth: int = 0) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "string_value":
        return v.string_value
    if kind in ("int_value", "bool_value", "double_value"):
        return getattr(v, kind)
    if kind == "bytes_value":
        return bytes(v.bytes_value)
    if depth >= MAX_DEPTH:
        return "…"
    if kind == "array_value":
        return [_value(x, depth + 1) for x in v.array_value.values]
    return {kv.key: _value(kv.value, depth + 1) for kv in v.kvlist_value.values}


def _attributes(items: Any) -> dict[str, Any]:
    out = {}
    for kv in items:
        value = kv.value
        # most values are non-empty strings: read without asking which field is set (an unset
        # string reads as "", and then the value is looked at properly)
        out[kv.key] = value.string_value or _value(value)
    return out


def _hex_id(raw: bytes, size: int, name: str) -> str:
    if not raw:
        return ""
    if len(raw) != size:
        raise Unusable(f"{name} must be {size} bytes, got {len(raw)}")
    return "" if raw.count(0) == size else raw.hex()


def _protobuf_logs(request: ExportLogsServiceRequest, tally: Tally, options: IngestOptions) -> None:
    for r, resource_logs in enumerate(request.resource_logs):
        resource = None
        for s, scope_logs in enumerate(resource_logs.scope_logs):
            scope = scope_logs.scope.name
            prefix = f"resource_logs[{r}].scope_logs[{s}].log_records"
            for i, record in enumerate(scope_logs.log_records):
                tally.records += 1
                try:
                    number = record.severity_number
                    if not 0 <= number <= 24:
                        raise Unusable(f"severity_number {number} is outside 0-24")
                    trace_id = _hex_id(record.trace_id, 16, "trace_id")
                    span_id = _hex_id(record.span_id, 8, "span_id")
                    severity = log_severity(number, record.severity_text)
                    if severity is None:
                        tally.dropped += 1
                        continue
                    if resource is None:
                        resource = resource_info(_attributes(resource_logs.resource.attributes))
                    body = _value(record.body) if record.HasField("body") else None
                    time = record.time_unix_nano or record.observed_time_unix_nano
                    attributes = _attributes(record.attributes)
                    tally.add(
                        prefix,
                        i,
                        [Raw("log", severity, attributes, resource, scope, trace_id, span_id,
                             time, body)],
                    )  # fmt: skip
                except Unusable as error:
                    tally.reject(prefix, i, str(error))


def _protobuf_traces(
    request: ExportTraceServiceRequest, tally: Tally, options: IngestOptions
) -> None:
    for r, resource_spans in enumerate(request.resource_spans):
        resource = None
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            scope = scope_spans.scope.name
            prefix = f"resource_spans[{r}].scope_spans[{s}].spans"
            for i, span in enumerate(scope_spans.spans):
                tally.records += 1
                try:
                    trace_id = _hex_id(span.trace_id, 16, "trace_id")
                    span_id = _hex_id(span.span_id, 8, "span_id")
                    if not trace_id or not span_id:
                        raise Unusable("a span needs a non-zero trace_id and span_id")
                    events = [e for e in span.events if e.name == "exception"]
                    if not events:
                        tally.dropped += 1
                        continue
                    if resource is None:
                        resource = resource_info(_attributes(resource_spans.resource.attributes))
                    extra = _attributes(span.attributes)
                    raws = [
                        Raw(
                            "span_event",
                            Severity.ERROR,
                            _attributes(event.attributes),
                            resource,
                            scope,
                            trace_id,
                            span_id,
                            event.time_unix_nano or span.end_time_unix_nano,
                            extra=extra,
                        )
                        for event in events
                    ]
                    tally.add(prefix, i, raws)
                except Unusable as error:
                    tally.reject(prefix, i, str(error))


# -- entry points ---------------------------------------------------------------------------

_WALKERS: dict[tuple[Signal, MediaType], Callable[[bytes, Tally, IngestOptions], None]] = {
    ("logs", "protobuf"): lambda b, t, o: _protobuf_logs(decode_logs_request(b), t, o),
    ("traces", "protobuf"): lambda b, t, o: _protobuf_traces(decode_trace_request(b), t, o),
    ("logs", "json"): lambda b, t, o: otlp_json.walk_logs(otlp_json.load(b), t, o),
    ("traces", "json"): lambda b, t, o: otlp_json.walk_traces(otlp_json.load(b), t, o),
}


def _parse(
    signal: Signal, body: bytes, content_type: str, options: IngestOptions | None
) -> ParseResult:
    options = options or DEFAULT_OPTIONS
    tally = Tally(signal, options)
    _WALKERS[signal, media_type(content_type)](body, tally, options)
    return tally.result()


def parse_logs(
    body: bytes, content_type: str, *, options: IngestOptions | None = None
) -> ParseResult:
    """An OTLP logs request (``/v1/logs``) → redacted, fingerprinted signal candidates.

    Raises ``UnsupportedMediaType`` or ``OtlpDecodeError``; nothing else escapes for any body.
    """
    return _parse("logs", body, content_type, options)


def parse_traces(
    body: bytes, content_type: str, *, options: IngestOptions | None = None
) -> ParseResult:
    """An OTLP traces request (``/v1/traces``): one candidate per ``exception`` span event."""
    return _parse("traces", body, content_type, options)


def encode_response(result: ParseResult, content_type: str) -> bytes:
    """The ``Export*ServiceResponse`` for ``result``, in the request's content type; with
    ``partial_success`` set exactly when something was rejected (OTLP: unset on full success)."""
    response: ExportLogsServiceResponse | ExportTraceServiceResponse
    if result.signal == "logs":
        response = ExportLogsServiceResponse()
        if result.rejected:
            response.partial_success.rejected_log_records = result.rejected
            response.partial_success.error_message = result.rejection
    else:
        response = ExportTraceServiceResponse()
        if result.rejected:
            response.partial_success.rejected_spans = result.rejected
            response.partial_success.error_message = result.rejection
    if media_type(content_type) == "protobuf":
        return response.SerializeToString()
    return json_format.MessageToJson(response, indent=None).encode()


def encode_status(message: str, content_type: str, code: int = 3) -> bytes:
    """A ``google.rpc.Status`` (the body OTLP/HTTP requires on 4xx/5xx), protobuf or JSON.
    ``code`` 3 is INVALID_ARGUMENT. Written by hand: two fields do not need another package."""
    try:
        kind = media_type(content_type)
    except UnsupportedMediaType:
        kind = "protobuf"  # the sender's type is the problem; the spec's default encoding
    if kind == "json":
        return json.dumps({"code": code, "message": message}, ensure_ascii=False).encode()
    text = message.encode("utf-8", "replace")
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)
