"""What every API view shares: who may call (a token or the session, then the token's rate),
the workspace of the path (404 when the caller holds no role in it), cursors, and the
``Idempotency-Key`` of a write."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import uuid
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from api.auth import SessionAuthentication, TokenAuthentication, TokenRate
from api.models import IdempotentAnswer
from api.problems import Problem
from quests.models import Workspace
from quests.roles import workspace_roles
from quests.selectors import workspaces_for

KEY_LIMIT = 200


class ApiView(APIView):
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    throttle_classes = [TokenRate]
    parser_classes = [JSONParser]

    def workspace(self, slug: str) -> Workspace:
        """The workspace of the path, if the caller holds a role in it; else a 404 problem."""
        found = [w for w in workspaces_for(self.request.user) if w.slug == slug]
        if not found:
            raise Problem("not-found", f"no workspace {slug!r}")
        return found[0]

    def roles(self, slug: str) -> frozenset:
        return workspace_roles(self.request.user).get(slug, frozenset())

    def body(self, serializer_class):
        """The request's JSON body, validated (400 naming each bad field); a body that is not
        a JSON object is a 400 too."""
        data = self.request.data
        if not hasattr(data, "get"):
            raise Problem(
                "invalid-input",
                "the body must be a JSON object",
                errors={"body": ["expected a JSON object"]},
            )
        serializer = serializer_class(data=data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    def query(self, serializer_class):
        serializer = serializer_class(data=self.request.query_params)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data


def idempotent(handler):
    """A write that honours ``Idempotency-Key``: the first answer (2xx) to a key is kept, and
    the same key with the same request (method, path, body) gets it back without acting again;
    the same key with another request is a 422 problem. A refused or failed request keeps
    nothing, so it may be sent again with its key. The handler gets ``key``: the caller's key
    (scoped to the account) or a fresh one, for the action layer's own idempotency."""

    @functools.wraps(handler)
    def wrapper(self, request, *args, **kwargs):
        given = request.headers.get("Idempotency-Key", "")
        if not given:
            return handler(self, request, *args, key=uuid.uuid4().hex, **kwargs)
        if len(given) > KEY_LIMIT or not given.isprintable():
            raise Problem(
                "invalid-input",
                "the Idempotency-Key is 1 to 200 printable characters",
                errors={"Idempotency-Key": ["1 to 200 printable characters"]},
            )
        fingerprint = _fingerprint(request)
        earlier = IdempotentAnswer.objects.filter(user_id=request.user.pk, key=given).first()
        if earlier is not None:
            if earlier.fingerprint != fingerprint:
                raise Problem(
                    "idempotency-key-reused",
                    "this Idempotency-Key was used for a different request",
                    reason="the key was used for a different request",
                )
            return Response(
                earlier.body, status=earlier.status, headers={"Idempotent-Replay": "true"}
            )
        response = handler(self, request, *args, key=f"api:{request.user.pk}:{given}", **kwargs)
        if 200 <= response.status_code < 300:
            try:
                with transaction.atomic():
                    IdempotentAnswer.objects.create(
                        user_id=request.user.pk,
                        key=given,
                        fingerprint=fingerprint,
                        status=response.status_code,
                        body=response.data,
                    )
            except IntegrityError:  # the same key answered at the same moment: one is kept
                pass
        return response

    return wrapper


def _fingerprint(request) -> str:
    data = request.data
    if hasattr(data, "dict") and request.FILES:  # multipart: fields, and files by name and size
        fields = {k: v for k, v in data.items() if k not in request.FILES}
        fields["files"] = {k: [f.name, f.size] for k, f in request.FILES.items()}
        data = fields
    elif hasattr(data, "dict"):
        data = data.dict()
    text = json.dumps([request.method, request.path, data], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# --- cursors -----------------------------------------------------------------------------------


def encode_cursor(at: datetime | None, pk: int) -> str:
    raw = f"{at.isoformat() if at else ''}|{pk}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime | None, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, pk = raw.partition("|")
        return (datetime.fromisoformat(at) if at else None), int(pk)
    except (ValueError, UnicodeDecodeError):
        raise Problem(
            "invalid-input",
            "the cursor is not one this API gave",
            errors={"cursor": ["not a cursor of this list"]},
        ) from None


def keyset(rows: QuerySet, field: str | None, cursor: str | None, limit: int):
    """One page of ``rows`` (ordered by ``field`` then pk, both descending) after ``cursor``:
    the rows and the cursor of the next page (None at the end). One query."""
    if cursor:
        at, pk = decode_cursor(cursor)
        if field and at is not None:
            rows = rows.filter(Q(**{f"{field}__lt": at}) | Q(**{field: at, "pk__lt": pk}))
        else:
            rows = rows.filter(pk__lt=pk)
    page = list(rows[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    if not more or not page:
        return page, None
    last = page[-1]
    return page, encode_cursor(getattr(last, field) if field else None, last.pk)
