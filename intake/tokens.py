"""Ingest tokens: what an OpenTelemetry exporter sends as ``Authorization: Bearer <token>``.

The token is ``secrets.token_urlsafe(32)``, shown once; the database keeps its first
characters (to look it up and to tell tokens apart) and a salted SHA-256 (``hash_token``:
a fast hash is right for a 256-bit random key). Verification compares in constant time.
"""

from __future__ import annotations

import secrets

from ephyra.forge.signatures import hash_token, verify_token_hash
from intake.otlp_models import IngestToken

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
