"""``POST /v1/logs`` and ``POST /v1/traces``: the OTLP/HTTP receiver (docs/otlp.md).

The order of the checks is the contract: the method (405), the bearer token (401) before a
byte of the body is read, the token's rate limit and record budget (429 with Retry-After), the
content type (415), the size before and after decompression (413), the body (400), the records
against the budget (413 for more than a whole window allows, else 429), then storage (503
with Retry-After when the database is unavailable; 500 for any other fault of ours).
Every refusal stores nothing and answers a ``google.rpc.Status`` in the request's content type.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from ephyra.telemetry import (
    PROTOBUF,
    IngestError,
    OtlpDecodeError,
    ParseResult,
    PayloadTooLarge,
    UnsupportedMediaType,
    decompress,
    encode_response,
    encode_status,
    media_type,
    parse_logs,
    parse_traces,
)
from intake.otlp.models import RefusedExports
from intake.otlp.services import signals_receive
from intake.otlp.throttle import records_return, records_wait, throttle_wait
from intake.otlp.tokens import bearer, token_verify
from intake.refusals import reason_of, refusal_count

logger = logging.getLogger("ephyra.intake.otlp")
RETRY_AFTER_SECONDS = 5
_STATUS = {OtlpDecodeError: 400, UnsupportedMediaType: 415, PayloadTooLarge: 413}
# google.rpc.Code for each answer (INVALID_ARGUMENT, UNAUTHENTICATED, INTERNAL, UNAVAILABLE, …).
_CODE = {400: 3, 401: 16, 404: 5, 405: 12, 413: 8, 415: 3, 429: 8, 500: 13, 503: 14}


def _answer_type(request: HttpRequest) -> str:
    """The request's own content type when it is one OTLP defines, else protobuf."""
    content_type = request.headers.get("Content-Type", "")
    try:
        return PROTOBUF if media_type(content_type) == "protobuf" else "application/json"
    except UnsupportedMediaType:
        return PROTOBUF


def _status(request: HttpRequest, status: int, message: str, **headers: str) -> HttpResponse:
    kind = _answer_type(request)
    refusal_count(RefusedExports, "exports", timezone.now(), reason=reason_of(status))
    body = encode_status(message, kind, _CODE.get(status, 2))
    return HttpResponse(body, status=status, content_type=kind, headers=headers)


def _read(request: HttpRequest, limit: int) -> bytes:
    """At most ``limit`` bytes of the (possibly compressed) body, else ``PayloadTooLarge``.
    Read from the stream, so Django's own upload cap does not answer first."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise OtlpDecodeError("Content-Length must be a whole number of bytes") from None
    if length > limit:
        raise PayloadTooLarge(f"body of {length} bytes is over the {limit}-byte limit")
    body = request.read(limit + 1)
    if len(body) > limit:
        raise PayloadTooLarge(f"body is over the {limit}-byte limit")
    return body


def _receive(request: HttpRequest, parse: Callable[[bytes, str], ParseResult]) -> HttpResponse:
    if request.method != "POST":
        return _status(request, 405, "only POST is allowed", Allow="POST")
    try:
        return _take(request, parse)
    except (OperationalError, InterfaceError):
        # The database is down, restarting or locked ("connection already closed" is an
        # InterfaceError). OTLP/HTTP: 503 is retryable; the exporter waits Retry-After.
        logger.warning("OTLP export deferred: the database is unavailable", exc_info=True)
        return _status(
            request,
            503,
            "the database is unavailable; retry later",
            **{"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    except Exception:
        # Anything else is a fault of ours: the export was rolled back whole. OTLP/HTTP wants a
        # google.rpc.Status for every failure, never Django's HTML page; what went wrong is in
        # the log, not in the answer. 500 is not retried: the same export would fail the same.
        logger.exception("OTLP export failed: an unexpected error; nothing was stored")
        return _status(request, 500, "internal error: the export was not stored")


def _take(request: HttpRequest, parse: Callable[[bytes, str], ParseResult]) -> HttpResponse:
    token = token_verify(bearer(request.headers.get("Authorization")))
    if token is None:
        return _status(request, 401, "a valid Authorization: Bearer <ingest token> is required")
    wait = throttle_wait(token)
    if wait is not None:
        # OTLP/HTTP Throttling: 429 is retryable; the exporter waits Retry-After seconds.
        logger.info("OTLP export throttled: ingest token %s is over its rate limit", token.pk)
        return _throttled(request, wait, f"{settings.EPHYRA_OTLP_RATE_LIMIT} exports")
    wait = records_wait(token, 0)
    if wait is not None:
        logger.info("OTLP export throttled: ingest token %s is over its record limit", token.pk)
        return _throttled(request, wait, f"{settings.EPHYRA_OTLP_RECORD_LIMIT} records")
    content_type = request.headers.get("Content-Type", "")
    limit = settings.EPHYRA_OTLP_MAX_BYTES
    try:
        media_type(content_type)
        body = decompress(_read(request, limit), request.headers.get("Content-Encoding", ""), limit)
        result = parse(body, content_type)
        _fits(result.records)
    except IngestError as error:
        status = _STATUS.get(type(error), 400)
        logger.info("OTLP export refused (%s): %s", status, error.message)
        return _status(request, status, error.message)
    wait = records_wait(token, result.records)
    if wait is not None:
        logger.info("OTLP export throttled: its records put token %s over its limit", token.pk)
        return _throttled(request, wait, f"{settings.EPHYRA_OTLP_RECORD_LIMIT} records")
    try:
        signals_receive(
            token, result, body_digest=hashlib.sha256(body).hexdigest(), received_at=timezone.now()
        )
    except BaseException:
        records_return(token, result.records)  # not taken: its retry is counted instead
        raise
    answer = _answer_type(request)
    return HttpResponse(encode_response(result, answer), status=200, content_type=answer)


def _throttled(request: HttpRequest, wait: int, budget: str) -> HttpResponse:
    return _status(
        request,
        429,
        f"over the limit of {budget} per {settings.EPHYRA_OTLP_RATE_WINDOW} s for this token; "
        f"retry in {wait} s",
        **{"Retry-After": str(wait)},
    )


def _fits(records: int) -> None:
    """An export with more records than a whole window allows would be throttled for ever:
    refused at once (413, not retried), so the sender sends smaller ones."""
    limit = settings.EPHYRA_OTLP_RECORD_LIMIT
    if 0 < limit < records:
        raise PayloadTooLarge(
            f"an export of {records} records is over the limit of {limit} records per "
            f"{settings.EPHYRA_OTLP_RATE_WINDOW} s for this token; send smaller exports"
        )


@csrf_exempt
def logs(request: HttpRequest) -> HttpResponse:
    return _receive(request, parse_logs)


@csrf_exempt
def traces(request: HttpRequest) -> HttpResponse:
    return _receive(request, parse_traces)


@csrf_exempt
def elsewhere(request: HttpRequest, rest: str) -> HttpResponse:
    return _status(
        request,
        404,
        "Ephyra receives only /v1/logs and /v1/traces; turn the SDK's other OTLP exporters off "
        "(OTEL_METRICS_EXPORTER=none)",
    )
