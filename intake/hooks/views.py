"""``POST /hooks/<forge>/<workspace>``: one endpoint per forge and workspace.

The order of the checks is the contract (docs/webhooks.md): the method, the hook, the content
type, the size, then the signature over the raw bytes, and only after that anything is parsed.
A refused delivery stores nothing.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from ephyra.redaction.redact import redact
from ephyra.webhooks import signatures
from ephyra.webhooks.facts import PayloadInvalid
from ephyra.webhooks.webhooks import DELIVERY_ID, SCHEMES, Scheme, parse_delivery
from intake.hooks.credentials import SecretUnavailable, read_secret
from intake.hooks.services import delivery_receive
from intake.models import Hook, RefusedDeliveries
from intake.refusals import reason_of, refusal_count

logger = logging.getLogger("ephyra.intake")
# ``push``, ``Push Hook``, ``pull_request_review_comment``: what the forges put in the header.
EVENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,99}$")


class Refusal(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _header(request: HttpRequest, names: tuple[str, ...]) -> tuple[str, str | None]:
    """The first of ``names`` the request carries a value for; without one, the names to ask
    for (``X-Gitea-Signature or X-Forgejo-Signature``) and None."""
    for name in names:
        value = request.headers.get(name)
        if value:
            return name, value
    return " or ".join(names), None


def _read_body(request: HttpRequest, limit: int) -> bytes:
    raw_length = request.META.get("CONTENT_LENGTH")
    if raw_length in (None, ""):
        raise Refusal(411, "Content-Length is required")
    try:
        length = int(raw_length)
    except ValueError:
        raise Refusal(400, "Content-Length must be a whole number of bytes") from None
    if length < 0:
        raise Refusal(400, "Content-Length must be a whole number of bytes")
    if length > limit:
        raise Refusal(413, f"the body is larger than {limit} bytes")
    # The declared length is only a claim: read at most one byte past the limit to be sure.
    body = request.read(limit + 1)
    if len(body) > limit:
        raise Refusal(413, f"the body is larger than {limit} bytes")
    return body


def _verify(hook: Hook, scheme: Scheme, request: HttpRequest, body: bytes) -> None:
    name, given = _header(request, scheme.proof_headers)
    if not given:
        raise Refusal(401, f"missing {name} header")
    if hook.token_hash:
        good = signatures.verify_token_hash(hook.token_hash, given)
    else:
        try:
            secret = read_secret(hook.secret_ref)
        except SecretUnavailable as exc:
            logger.error("%s hook of %s: %s", hook.kind, hook.workspace.slug, exc)
            raise Refusal(503, "the hook's secret cannot be read; see the server log") from None
        if scheme.uses_token:
            good = signatures.verify_token(secret, given)
        elif scheme.kind == "github":
            good = signatures.verify_github(secret.encode(), body, given)
        else:
            good = signatures.verify_gitea(secret.encode(), body, given)
    if not good:
        raise Refusal(
            401, "the token does not match" if scheme.uses_token else "the signature does not match"
        )


def _payload(content_type: str, body: bytes) -> dict[str, Any]:
    if content_type == "application/x-www-form-urlencoded":
        try:
            form = parse_qs(body.decode("utf-8"), max_num_fields=50, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            raise Refusal(400, "the form body cannot be read") from None
        values = form.get("payload")
        if not values:
            raise Refusal(400, "the form has no payload field")
        body = values[0].encode("utf-8")
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        raise Refusal(400, "the body is not valid JSON") from None
    if not isinstance(payload, dict):
        raise Refusal(400, "the payload must be a JSON object")
    try:
        return _storable(payload)
    except RecursionError:
        raise Refusal(400, "the payload is nested too deeply") from None


def _storable(value: Any) -> Any:
    """The payload with every string made storable: JSON may spell a NUL (``\\u0000``) or a
    lone surrogate, which PostgreSQL's text and JSON columns and UTF-8 itself refuse."""
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "replace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(v) for v in value]
    return value


@csrf_exempt
def receive(request: HttpRequest, kind: str, slug: str) -> JsonResponse:
    scheme = SCHEMES[kind]
    if request.method != "POST":
        return _refused(kind, 405, "only POST is allowed", headers={"Allow": "POST"})
    hook = (
        Hook.objects.select_related("workspace")
        .filter(kind=kind, workspace__slug=slug, active=True)
        .first()
    )
    if hook is None:
        return _refused(kind, 404, f"no {scheme.label} hook is configured for workspace {slug!r}")
    try:
        return _receive(request, hook, scheme)
    except Refusal as refusal:
        # A refusal may quote what the request sent (its content type); the log gets it redacted.
        logger.warning("%s delivery to %s refused: %s", kind, slug, redact(refusal.message))
        return _refused(kind, refusal.status, refusal.message)


def _refused(kind: str, status: int, message: str, **extra: Any) -> JsonResponse:
    """The answer to a refused delivery, counted for ``/metrics`` by forge and reason."""
    refusal_count(
        RefusedDeliveries, "deliveries", timezone.now(), forge=kind, reason=reason_of(status)
    )
    return JsonResponse({"error": message}, status=status, **extra)


def _receive(request: HttpRequest, hook: Hook, scheme: Scheme) -> JsonResponse:
    content_type = (request.content_type or "").lower()
    if content_type not in scheme.content_types:
        accepted = " or ".join(sorted(scheme.content_types))
        shown = content_type[:100] or "none"
        raise Refusal(415, f"unsupported content type {shown!r}: send {accepted}")
    body = _read_body(request, settings.EPHYRA_WEBHOOK_MAX_BYTES)
    _verify(hook, scheme, request, body)

    name, delivery_id = _header(request, scheme.delivery_headers)
    if not delivery_id:
        raise Refusal(400, f"missing {name} header")
    if not DELIVERY_ID.match(delivery_id):
        raise Refusal(400, f"{name} must be 1 to 100 letters, digits, '.', '_' or '-'")
    name, event = _header(request, scheme.event_headers)
    if not event:
        raise Refusal(400, f"missing {name} header")
    event = event.strip()
    if not EVENT_NAME.match(event):
        raise Refusal(400, f"{name} is not an event name")

    payload = _payload(content_type, body)
    try:
        fact = parse_delivery(scheme.kind, event, payload)
    except PayloadInvalid as exc:
        raise Refusal(400, str(exc)) from None

    receipt = delivery_receive(
        hook, delivery_id=delivery_id, event=event, fact=fact, received_at=timezone.now()
    )
    if receipt.status == "accepted":
        return JsonResponse({"status": "accepted", "events": receipt.events}, status=202)
    answer: dict[str, Any] = {"status": receipt.status}
    if receipt.status == "processed":
        answer["events"] = 0
    if receipt.reason:
        answer["reason"] = receipt.reason
    return JsonResponse(answer, status=200)
