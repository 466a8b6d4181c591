"""Personal API tokens: made, checked, listed and revoked here, and nowhere else.

A token is ``eph_`` and 40 random URL-safe characters, shown once. The database keeps its
first 12 characters (``prefix``, to find the row and to tell tokens apart) and a salted
SHA-256 of the whole (a fast hash is right for a 240-bit random key; a slow one would make
every forged request cost the server). Verification compares in constant time.

A token reaches the workspaces it names, with at most the role it names: what the owner may do
through it is what their own roles allow AND what the token's role allows (``effective_roles``).
Making and revoking a token is audited in each workspace it names, never with the token itself.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from api.models import ApiToken, TokenActor
from ephyra.webhooks.signatures import hash_token, verify_token_hash
from ledger.audit import audit_append
from quests.models import Workspace
from quests.roles import ALLOWED, Role, workspace_roles

PREFIX = "eph_"
PREFIX_LENGTH = 12  # "eph_" and 8 random characters
DEFAULT_DAYS = 90
MAX_DAYS = 366
NAME_LIMIT = 100


class TokenRefused(ValueError):
    """A token that cannot be made or revoked as asked, and why, in words for the person."""


@dataclass(frozen=True)
class Issued:
    row: ApiToken
    token: str  # shown once, never stored


def rights(roles) -> frozenset[str]:
    """The actions ``roles`` allow (``quests.roles.ALLOWED``)."""
    return frozenset(action for action, allowed in ALLOWED.items() if set(roles) & allowed)


def effective_roles(held: frozenset[Role], token_role: Role) -> frozenset[Role]:
    """The roles a token of ``token_role`` leaves an owner who holds ``held``: the token's role
    when the owner's own rights cover it (an admin covers every role), else the owner's roles
    whose rights the token's role covers. Where only reading would remain (a reviewer's staff
    token), nothing remains: no role means only reading."""
    if not held:
        return frozenset()
    if token_role in held or Role.ADMIN in held:
        return frozenset({token_role})
    cap = rights({token_role})
    return frozenset(role for role in held if rights({role}) <= cap)


def token_create(
    user, *, workspaces: list[str], role: str, days: int = DEFAULT_DAYS, name: str = ""
) -> Issued:
    """A new token of ``user`` for ``workspaces`` with ``role``, expiring in ``days``. Refused
    (``TokenRefused``, nothing stored) for a workspace the owner holds no role in, a role their
    own roles do not cover there, or a lifetime outside 1..366 days."""
    slugs = sorted(set(workspaces))
    if not slugs:
        raise TokenRefused("a token names at least one workspace")
    if role not in {r.value for r in Role}:
        raise TokenRefused(f"a token's role is reviewer, admin or staff, not {role!r}")
    if not 1 <= int(days) <= MAX_DAYS:
        raise TokenRefused(f"a token lives 1 to {MAX_DAYS} days, not {days}")
    name = (name or "").strip()
    if len(name) > NAME_LIMIT:
        raise TokenRefused(f"the name is {len(name)} characters; at most {NAME_LIMIT}")
    held = workspace_roles(user)
    for slug in slugs:
        if slug not in held:
            raise TokenRefused(f"you hold no role in the workspace {slug!r}")
        if effective_roles(held[slug], Role(role)) != {Role(role)}:
            raise TokenRefused(
                f"your roles in {slug} ({', '.join(sorted(held[slug]))}) do not cover {role}"
            )
    token = PREFIX + secrets.token_urlsafe(30)
    now = timezone.now()
    with transaction.atomic():
        row = ApiToken.objects.create(
            user=user,
            name=name,
            prefix=token[:PREFIX_LENGTH],
            digest=hash_token(token, secrets.token_bytes(16)),
            workspaces=slugs,
            role=role,
            created_at=now,
            expires_at=now + timedelta(days=int(days)),
        )
        _audit(user, row, "api_token.created", expires_at=row.expires_at.isoformat())
    return Issued(row, token)


def token_revoke(user, row: ApiToken) -> ApiToken:
    """Stop accepting a token from now on, audited; the owner, or a superuser. The row is kept.
    ``TokenRefused`` when it already was revoked."""
    if row.user_id != user.pk and not user.is_superuser:
        raise TokenRefused(f"the token {row.prefix}… is not yours")
    with transaction.atomic():
        now = timezone.now()
        if not ApiToken.objects.filter(pk=row.pk, revoked_at=None).update(revoked_at=now):
            raise TokenRefused(f"the token {row.prefix}… was already revoked")
        row.revoked_at = now
        _audit(user, row, "api_token.revoked", owner=row.user.get_username())
    return row


def tokens_of(user) -> list[ApiToken]:
    """The person's tokens, newest first (revoked and expired ones too, to tell them apart)."""
    return list(ApiToken.objects.filter(user=user).order_by("-created_at", "-pk"))


def token_verify(token: str | None) -> ApiToken | None:
    """The live token row ``token`` matches (not revoked, not expired, its owner active), or
    None. Every candidate with the prefix is compared in constant time."""
    if not token or not token.startswith(PREFIX) or len(token) > 200:
        return None
    found = None
    rows = ApiToken.objects.select_related("user").filter(prefix=token[:PREFIX_LENGTH])
    for row in rows:
        if verify_token_hash(row.digest, token):
            found = row
    if found is None or found.revoked_at is not None or found.expires_at <= timezone.now():
        return None
    if not found.user.is_active:
        return None
    return found


def token_actor(row: ApiToken) -> TokenActor:
    """The token's owner as the token lets them act: the same account, holding in each of the
    token's workspaces only the roles ``effective_roles`` leaves, and nowhere else."""
    owner = row.user
    actor = TokenActor()
    actor.__dict__.update({k: v for k, v in owner.__dict__.items() if k != "_state"})
    actor._state = owner._state
    actor.is_superuser = False
    held = workspace_roles(owner)
    names = [
        f"{slug}:{role}"
        for slug in row.workspaces
        for role in effective_roles(held.get(slug, frozenset()), Role(row.role))
    ]
    # The checks read role groups; a token's role may be one its owner holds through another
    # (an admin's reviewer token) or through being a superuser, whose group may not exist yet.
    if names and Group.objects.filter(name__in=names).count() < len(names):
        for name in names:
            Group.objects.get_or_create(name=name)
    actor.token_groups = names
    actor.api_token = row
    return actor


def touch(row: ApiToken) -> None:
    """Note when a token was last used, at most once a minute (a write per request is waste)."""
    now = timezone.now()
    if row.last_used_at is None or now - row.last_used_at > timedelta(minutes=1):
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        row.last_used_at = now


def _audit(user, row: ApiToken, action: str, **more) -> None:
    slugs = row.workspaces
    for workspace in Workspace.objects.select_for_update().filter(slug__in=slugs).order_by("slug"):
        audit_append(
            workspace,
            at=timezone.now(),
            actor=f"person:{user.get_username()}",
            action=action,
            object=f"api_token:{row.prefix}",
            payload={"prefix": row.prefix, "role": row.role, "workspaces": row.workspaces, **more},
        )
