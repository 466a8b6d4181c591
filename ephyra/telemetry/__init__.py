"""Telemetry: OTLP logs and traces (protobuf and JSON) → redacted, fingerprinted signal
candidates.

Pure: no Django, no database, no clock. Intake's OTLP view (``intake/otlp/views.py``) calls,
in order::

    body = decompress(request.body, request.headers.get("Content-Encoding", ""))
    result = parse_logs(body, content_type)          # or parse_traces
    for candidate in result.candidates: ...          # stored, grouped into quests by intake
    return encode_response(result, content_type)     # 200, the same Content-Type

and on ``UnsupportedMediaType`` (415), ``PayloadTooLarge`` (413) or ``OtlpDecodeError`` (400)
answers ``encode_status(str(error), content_type)``. Triage reads what intake stored of a
quest's signals later, as the ``run_triage`` effect. ``docs/telemetry.md`` says what becomes a
signal, which attributes are read and the fingerprint algorithm; the redaction it applies is
``ephyra.redaction``.
"""

from ephyra.redaction.redact import is_secret_key
from ephyra.telemetry.errors import (
    IngestError,
    OtlpDecodeError,
    PayloadTooLarge,
    UnsupportedMediaType,
)
from ephyra.telemetry.fingerprint import FINGERPRINT_VERSION, fingerprint, parameterise
from ephyra.telemetry.otlp import (
    JSON,
    PROTOBUF,
    decode_logs_request,
    decode_trace_request,
    decompress,
    encode_response,
    encode_status,
    media_type,
    parse_logs,
    parse_traces,
)
from ephyra.telemetry.signals import FIELD_LIMITS, IngestOptions, ParseResult, SignalCandidate
from ephyra.telemetry.stack import Frame, ParsedStack, detect_language, normalise_path, parse_stack

__all__ = [
    "FIELD_LIMITS",
    "FINGERPRINT_VERSION",
    "JSON",
    "PROTOBUF",
    "Frame",
    "IngestError",
    "IngestOptions",
    "OtlpDecodeError",
    "ParseResult",
    "ParsedStack",
    "PayloadTooLarge",
    "SignalCandidate",
    "UnsupportedMediaType",
    "decode_logs_request",
    "decode_trace_request",
    "decompress",
    "detect_language",
    "encode_response",
    "encode_status",
    "fingerprint",
    "is_secret_key",
    "media_type",
    "normalise_path",
    "parameterise",
    "parse_logs",
    "parse_stack",
    "parse_traces",
]
