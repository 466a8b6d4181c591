"""Ingest tokens: what an OpenTelemetry exporter sends as ``Authorization: Bearer <token>``.

The token is ``secrets.token_urlsafe(32)``, shown once; the database keeps its first
characters (to look it up and to tell tokens apart) and a salted SHA-256 (``hash_token``:
a fast hash is right for a 256-bit random key). Verification compares in constant time.

``token_issue`` and ``token_revoke`` are what a person does on the dashboard: they check the
person is an admin of the workspace and record the step in the workspace's audit chain.
"""

from __future__ import annotations

import secrets

from django.db import transaction
from django.utils import timezone

from ephyra.webhooks.signatures import hash_token, verify_token_hash
from intake.otlp.models import IngestToken
from ledger.audit import audit_append
from quests.models import Workspace
from quests.roles import require

PREFIX_LENGTH = 8


def token_create(workspace, *, name: str = "") -> tuple[IngestToken, str]:
    """A new token for ``workspace``: the row and the token itself (to show once)."""
    token = secrets.token_urlsafe(32)
    row = IngestToken.objects.create(
        workspace=workspace,
        name=name,
        digest=hash_token(token, secrets.token_bytes(16)),
        prefix=token[:PREFIX_LENGTH],
    )
    return row, token


def token_issue(user, workspace: Workspace, *, name: str = "") -> tuple[IngestToken, str]:
    """``token_create`` for an admin of the workspace, audited (``ingest_token.created``, with
    the prefix and name, never the token). The token is returned to show once."""
    require(user, workspace, "administer")
    with transaction.atomic():
        locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
        row, token = token_create(locked, name=name)
        _audit(locked, user, "ingest_token.created", row)
    return row, token


def token_revoke(user, row: IngestToken) -> IngestToken:
    """Stop accepting a token (exports bearing it answer 401 from now on), audited. The row is
    kept, inactive, so the signals it brought still name it. ``ValueError`` when it already
    was revoked."""
    require(user, row.workspace, "administer")
    with transaction.atomic():
        locked = Workspace.objects.select_for_update().get(pk=row.workspace_id)
        if not IngestToken.objects.filter(pk=row.pk, active=True).update(active=False):
            raise ValueError(f"the token {row.prefix}… was already revoked")
        row.active = False
        _audit(locked, user, "ingest_token.revoked", row)
    return row


def _audit(workspace: Workspace, user, action: str, row: IngestToken) -> None:
    audit_append(
        workspace,
        at=timezone.now(),
        actor=f"person:{user.get_username()}",
        action=action,
        object=f"ingest_token:{row.pk}",
        payload={"prefix": row.prefix, "name": row.name},
    )


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, value = (header or "").strip().partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value:
        return None
    return value


def token_verify(token: str | None) -> IngestToken | None:
    """The active token row ``token`` matches, or None. Every candidate with the same prefix is
    compared (in constant time), so the answer does not depend on which one matched first."""
    if not token or len(token) > 200:
        return None
    found = None
    candidates = IngestToken.objects.select_related("workspace").filter(
        prefix=token[:PREFIX_LENGTH], active=True
    )
    for row in candidates:
        if verify_token_hash(row.digest, token) and found is None:
            found = row
    return found
