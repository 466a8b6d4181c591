"""How each forge proves a delivery is its own, checked in constant time.

- GitHub: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>``.
- Gitea and Forgejo: ``X-Gitea-Signature`` / ``X-Forgejo-Signature``: the same HMAC, bare hex.
- GitLab: ``X-Gitlab-Token: <the secret token itself>``; there is no signature over the body.

Every comparison goes through ``hmac.compare_digest`` on bytes, so neither a wrong length nor a
wrong first character answers faster than a near miss.
"""

from __future__ import annotations

import hashlib
import hmac

TOKEN_HASH_SCHEME = "sha256"


def hmac_sha256_hex(secret: bytes, body: bytes) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def _same(given: str, expected: str) -> bool:
    # Header values are Latin-1 text (WSGI); any byte sequence compares, none raises.
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )


def verify_github(secret: bytes, body: bytes, header: str | None) -> bool:
    """``header`` is X-Hub-Signature-256 as sent; GitHub writes the hex digest in lower case."""
    if not header or not secret:
        return False
    return _same(header.strip(), "sha256=" + hmac_sha256_hex(secret, body))


def verify_gitea(secret: bytes, body: bytes, header: str | None) -> bool:
    """``header`` is X-Gitea-Signature or X-Forgejo-Signature: the bare hex digest."""
    if not header or not secret:
        return False
    return _same(header.strip().lower(), hmac_sha256_hex(secret, body))


def verify_token(expected: str, header: str | None) -> bool:
    """GitLab's X-Gitlab-Token against the secret token read from the hook's reference."""
    if not header or not expected:
        return False
    return _same(header, expected)


def hash_token(token: str, salt: bytes) -> str:
    """A salted digest of a GitLab token, stored instead of the token.

    ``sha256$<salt hex>$<digest hex>``. A fast hash is right here, not a password hash: the
    token is a random key of 256 bits that ``hooks add --generate-token`` made, which no
    dictionary guesses, and a slow hash would make every forged request cost the server CPU.
    """
    if len(salt) < 16:
        raise ValueError("the salt must be at least 16 bytes")
    digest = hashlib.sha256(salt + token.encode("utf-8")).hexdigest()
    return f"{TOKEN_HASH_SCHEME}${salt.hex()}${digest}"


def verify_token_hash(stored: str, header: str | None) -> bool:
    """GitLab's X-Gitlab-Token against a digest made by ``hash_token``."""
    if not header:
        return False
    scheme, _, rest = stored.partition("$")
    salt_hex, _, digest = rest.partition("$")
    if scheme != TOKEN_HASH_SCHEME or not digest:
        return False
    try:
        salt = bytes.fromhex(salt_hex)
    except ValueError:
        return False
    given = hashlib.sha256(salt + header.encode("utf-8", "surrogateescape")).hexdigest()
    return _same(given, digest)


def is_token_hash(value: str) -> bool:
    scheme, _, rest = value.partition("$")
    salt_hex, _, digest = rest.partition("$")
    return scheme == TOKEN_HASH_SCHEME and len(digest) == 64 and len(salt_hex) >= 32
