"""Every error of the API is a problem (RFC 9457): ``application/problem+json`` with ``type``,
``title``, ``status`` and ``detail``, and what the kind of problem adds (``errors`` for bad
input, ``reason`` for a refusal by the machine, ``state`` and ``head`` for a stale head).

Each ``type`` is ``/api/problems/<name>`` on the server, which answers with what it means.
The exception handler turns DRF's errors and the action layer's refusals into problems; the
views raise ``Problem`` for the rest.
"""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions as drf
from rest_framework.response import Response

from ephyra.policy import PolicyError
from quests.actions import Invalid, Refused, Stale
from quests.policies import PolicyRefused

log = logging.getLogger(__name__)
CONTENT_TYPE = "application/problem+json"

# name: (status, title, what it means)
PROBLEMS: dict[str, tuple[int, str, str]] = {
    "invalid-input": (
        400,
        "Invalid input",
        "The request's body or query could not be used; `errors` names each field and why.",
    ),
    "not-authenticated": (
        401,
        "Not authenticated",
        "No credentials, or a token that is unknown, revoked or expired. Send "
        "`Authorization: Bearer eph_...` with a live personal API token.",
    ),
    "forbidden": (
        403,
        "Forbidden",
        "Your role in the workspace (as your token's role caps it) does not allow this, or a "
        "session write came without its CSRF token.",
    ),
    "not-found": (
        404,
        "Not found",
        "No such object or path; another workspace's object, or one outside your token's "
        "workspaces, is not revealed to exist.",
    ),
    "method-not-allowed": (405, "Method not allowed", "This path does not take that method."),
    "not-acceptable": (406, "Not acceptable", "The API answers JSON only."),
    "stale-head": (
        409,
        "Stale head",
        "The object moved on since you read it: `head` you sent is not its journal head any "
        "more. The problem carries `state` and `head` as they are now; read it again, then act.",
    ),
    "unsupported-media-type": (
        415,
        "Unsupported media type",
        "Writes take `application/json` (an evidence upload takes `multipart/form-data`).",
    ),
    "refused": (
        422,
        "Refused",
        "The machine refuses this in the object's present state; `reason` says why. Nothing "
        "changed.",
    ),
    "idempotency-key-reused": (
        422,
        "Idempotency key reused",
        "This Idempotency-Key was used before for a different request. Use a new key for a "
        "new request; the same key with the same request answers as the first time.",
    ),
    "rate-limited": (
        429,
        "Too many requests",
        "The token sent more requests than its rate allows; wait `Retry-After` seconds.",
    ),
    "server-error": (500, "Server error", "Something broke on the server; it is logged."),
}
BY_STATUS = {
    400: "invalid-input",
    401: "not-authenticated",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    409: "stale-head",
    415: "unsupported-media-type",
    422: "refused",
    429: "rate-limited",
    500: "server-error",
}


class Problem(drf.APIException):
    """A problem a view raises: its ``name`` (a key of ``PROBLEMS``), a detail in words, and
    the fields its kind adds."""

    def __init__(self, name: str, detail: str, **extra) -> None:
        self.name = name
        self.status_code = PROBLEMS[name][0]
        self.extra = extra
        super().__init__(detail)


def problem_type(request: HttpRequest | None, name: str) -> str:
    path = f"/api/problems/{name}"
    return request.build_absolute_uri(path) if request is not None else path


def problem_body(request, name: str, detail: str, **extra) -> dict:
    status, title, _ = PROBLEMS[name]
    return {
        "type": problem_type(request, name),
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }


def exception_handler(exc, context):
    """DRF's exception handler for the API: every error a problem."""
    request = context.get("request")
    headers = {}
    extra: dict = {}
    if isinstance(exc, Problem):
        name, detail, extra = exc.name, str(exc.detail), exc.extra
    elif isinstance(exc, Stale):
        name, detail = "stale-head", str(exc)
    elif isinstance(exc, Refused):
        name, detail, extra = "refused", str(exc), {"reason": str(exc)}
    elif isinstance(exc, (Invalid, PolicyRefused)) and not isinstance(exc, Refused):
        kind = "refused" if isinstance(exc, PolicyRefused) else "invalid-input"
        name, detail = kind, str(exc)
        extra = {"reason": str(exc)} if kind == "refused" else {"errors": {"detail": [str(exc)]}}
    elif isinstance(exc, PolicyError):
        problems = [
            f"line {line if line is not None else '?'}: {path or '(top)'}: {message}"
            for path, line, message in exc.problems
        ] or [str(exc)]
        name, detail, extra = (
            "invalid-input",
            "the policy text is not valid",
            {"errors": {"text": problems}},
        )
    elif isinstance(exc, Http404):
        name, detail = "not-found", str(exc) or "not found"
    elif isinstance(exc, DjangoPermissionDenied):
        name, detail = "forbidden", str(exc) or "forbidden"
    elif isinstance(exc, drf.ValidationError):
        name, detail = "invalid-input", "the input is not valid"
        errors = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        extra = {"errors": errors}
    elif isinstance(exc, drf.ParseError):
        name, detail = "invalid-input", str(exc.detail)
        extra = {"errors": {"body": [str(exc.detail)]}}
    elif isinstance(exc, drf.Throttled):
        name, detail = "rate-limited", str(exc.detail)
        headers["Retry-After"] = str(int(exc.wait or 1))
    elif isinstance(exc, (drf.NotAuthenticated, drf.AuthenticationFailed)):
        name, detail = "not-authenticated", str(exc.detail)
        headers["WWW-Authenticate"] = 'Bearer realm="api"'
    elif isinstance(exc, drf.APIException):
        name = BY_STATUS.get(exc.status_code, "invalid-input")
        detail = str(exc.detail)
    else:
        log.exception("API error", exc_info=exc)
        name, detail = "server-error", "the server failed to answer; it is logged"
    body = problem_body(request, name, detail, **extra)
    response = Response(body, status=body["status"], headers=headers, content_type=CONTENT_TYPE)
    return response


@csrf_exempt
def not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """Any path under /api/ that names nothing, whatever the method: a 404 problem (never a
    page, never a CSRF refusal)."""
    body = problem_body(request, "not-found", f"there is nothing at /api/{path}")
    return JsonResponse(body, status=404, content_type=CONTENT_TYPE)


def problem_page(request: HttpRequest, name: str) -> JsonResponse:
    """What a problem type means, at the URI that names it."""
    if name not in PROBLEMS:
        return not_found(request, f"problems/{name}")
    status, title, meaning = PROBLEMS[name]
    return JsonResponse(
        {
            "type": problem_type(request, name),
            "title": title,
            "status": status,
            "description": meaning,
        }
    )
