"""How much an ingest token may send: ``EPHYRA_OTLP_RATE_LIMIT`` requests and
``EPHYRA_OTLP_RECORD_LIMIT`` records per ``EPHYRA_OTLP_RATE_WINDOW`` seconds, counted in
Django's cache (Redis when ``REDIS_URL`` is set, so the counts hold across web processes and
hosts; files under the data directory otherwise).

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

from intake.otlp.models import IngestToken

logger = logging.getLogger("ephyra.intake.otlp")


def _key(token: IngestToken) -> str:
    # The token's salted digest names it uniquely across databases (two test databases or two
    # installations sharing one Redis both have a token with pk 1), and reveals nothing.
    return "otlp-rate:" + hashlib.sha256(token.digest.encode()).hexdigest()[:24]


def _window(token: IngestToken, now: float) -> tuple[str, float, int]:
    """The name of the token's counters in its current window, the instant it opened, and
    its length; the first call opens one."""
    window = settings.EPHYRA_OTLP_RATE_WINDOW
    key = _key(token)
    cache.add(f"{key}:since", now, timeout=window)
    since = cache.get(f"{key}:since", now)
    return f"{key}:{since!r}", since, window


def _add(counter: str, amount: int, window: int) -> int:
    """Add ``amount`` to ``counter`` (made for the window if need be); the new count."""
    cache.add(counter, 0, timeout=window + 1)
    try:
        return cache.incr(counter, amount)
    except ValueError:  # expired or evicted between add and incr: this is its first request
        cache.set(counter, amount, timeout=window + 1)
        return amount


def throttle_wait(token: IngestToken, *, now: float | None = None) -> int | None:
    """Seconds ``token`` must wait before its next export, or None when this one may go on.
    Every call counts one request. A cache that fails lets the request through: losing the
    limit for a while is better than refusing all telemetry while Redis restarts."""
    limit = settings.EPHYRA_OTLP_RATE_LIMIT
    if limit <= 0:
        return None
    now = time.time() if now is None else now
    try:
        counter, since, window = _window(token, now)
        count = _add(counter, 1, window)
    except Exception:  # any cache failure: logged, and the limiter fails open
        logger.warning("OTLP rate limit not applied: the cache is unavailable", exc_info=True)
        return None
    if count <= limit:
        return None
    return max(1, math.ceil(since + window - now))


def records_wait(token: IngestToken, records: int, *, now: float | None = None) -> int | None:
    """Seconds ``token`` must wait before ``records`` more records (log records or spans) fit
    in its window's ``EPHYRA_OTLP_RECORD_LIMIT``, or None when they fit, and are now counted.
    Records that do not fit are not counted: the export is refused whole, and a smaller one
    may still go. ``records`` 0 only asks whether the budget is spent already (the check
    before a body is read). Fails open like ``throttle_wait``."""
    limit = settings.EPHYRA_OTLP_RECORD_LIMIT
    if limit <= 0:
        return None
    now = time.time() if now is None else now
    try:
        counter, since, window = _window(token, now)
        counter += ":records"
        if records:
            count = _add(counter, records, window)
            over = count > limit
            if over:
                cache.decr(counter, records)
        else:
            over = (cache.get(counter) or 0) >= limit
    except Exception:
        logger.warning("OTLP record limit not applied: the cache is unavailable", exc_info=True)
        return None
    return max(1, math.ceil(since + window - now)) if over else None


def records_return(token: IngestToken, records: int) -> None:
    """Take back ``records`` that ``records_wait`` counted for an export that was then not
    stored (the database refused it): the exporter's retry counts them again."""
    if settings.EPHYRA_OTLP_RECORD_LIMIT <= 0 or not records:
        return
    try:
        counter, _, _ = _window(token, time.time())
        cache.decr(f"{counter}:records", records)
    except Exception:  # gone with its window, or the cache is down: nothing to give back
        logger.warning("OTLP records of a failed export not given back", exc_info=True)
