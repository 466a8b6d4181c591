"""Who calls the API: a personal token (``Authorization: Bearer eph_...``) or the dashboard's
session (its writes need the CSRF token, as the pages' do); and how often a token may call.

A token's caller is its owner as the token lets them act (``api.tokens.token_actor``): the same
account, with only the roles the token leaves them in only the token's workspaces.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache
from rest_framework import authentication, exceptions, throttling

from api.tokens import token_actor, token_verify, touch


class TokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").strip()
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise exceptions.AuthenticationFailed(
                "the Authorization header is not 'Bearer <token>'"
            )
        row = token_verify(token.strip())
        if row is None:
            raise exceptions.AuthenticationFailed("the token is unknown, revoked or expired")
        touch(row)
        return token_actor(row), row

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class SessionAuthentication(authentication.SessionAuthentication):
    """The dashboard's session; DRF's, which checks the CSRF token of a write."""


class TokenRate(throttling.BaseThrottle):
    """``EPHYRA_API_RATE_LIMIT`` requests per token per ``EPHYRA_API_RATE_WINDOW`` seconds,
    counted in fixed windows in Django's cache (shared by every web process with Redis). A
    session is not counted: the pages' own pace bounds it."""

    def allow_request(self, request, view) -> bool:
        token = getattr(request, "auth", None)
        prefix = getattr(token, "prefix", None)
        if prefix is None:
            return True
        limit, window = settings.EPHYRA_API_RATE_LIMIT, settings.EPHYRA_API_RATE_WINDOW
        now = time.time()
        start = int(now // window) * window
        key = f"api-rate:{prefix}:{start}"
        cache.add(key, 0, timeout=window + 5)
        try:
            count = cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=window + 5)
            count = 1
        self._wait = max(1, int(start + window - now + 0.999))
        return count <= limit

    def wait(self) -> float:
        return getattr(self, "_wait", 1)
