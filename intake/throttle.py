"""How many OTLP exports an ingest token may send: ``EPHYRA_OTLP_RATE_LIMIT`` requests per
``EPHYRA_OTLP_RATE_WINDOW`` seconds, counted in Django's cache (Redis when ``REDIS_URL`` is set,
so the count holds across web processes and hosts; files under the data directory otherwise).

A window opens with a token's first request and lasts ``window`` seconds; each window has its
own counter, named by the instant it opened, so a counter never outlives its window whatever
the cache backend does to expiry on increment. The answer to a request over the limit is the
number of whole seconds until the window closes: the ``Retry-After`` of a 429 (OTLP/HTTP
Throttling), after which the exporter's retry opens a new window.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time

from django.conf import settings
from django.core.cache import cache

from intake.otlp_models import IngestToken

logger = logging.getLogger("ephyra.intake.otlp")


def _key(token: IngestToken) -> str:
    # The token's salted digest names it uniquely across databases (two test databases or two
    # installations sharing one Redis both have a token with pk 1), and reveals nothing.
    return "otlp-rate:" + hashlib.sha256(token.digest.encode()).hexdigest()[:24]


def throttle_wait(token: IngestToken, *, now: float | None = None) -> int | None:
    """Seconds ``token`` must wait before its next export, or None when this one may go on.
    Every call counts one request. A cache that fails lets the request through: losing the
    limit for a while is better than refusing all telemetry while Redis restarts."""
    limit = settings.EPHYRA_OTLP_RATE_LIMIT
    if limit <= 0:
        return None
    window = settings.EPHYRA_OTLP_RATE_WINDOW
    now = time.time() if now is None else now
    key = _key(token)
    try:
        cache.add(f"{key}:since", now, timeout=window)
        since = cache.get(f"{key}:since", now)
        counter = f"{key}:{since!r}"
        cache.add(counter, 0, timeout=window + 1)
        try:
            count = cache.incr(counter)
        except ValueError:  # expired or evicted between add and incr: this is its first request
            cache.set(counter, 1, timeout=window + 1)
            count = 1
    except Exception:  # any cache failure: logged, and the limiter fails open
        logger.warning("OTLP rate limit not applied: the cache is unavailable", exc_info=True)
        return None
    if count <= limit:
        return None
    return max(1, math.ceil(since + window - now))
