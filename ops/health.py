"""The readiness checks: can this process do its work right now? Each one answers only
whether it passed; why it failed goes to the log, never to the caller (an anonymous probe must
learn nothing of the configuration: no host, no path, no URL)."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import redis
from django.conf import settings
from django.db import connection

logger = logging.getLogger("ephyra.ops")
TIMEOUT_SECONDS = 2


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _writable(directory: Path) -> None:
    """A file made, written, synced and removed in ``directory``: what the worker's journals
    and the filesystem broker do there."""
    handle, name = tempfile.mkstemp(prefix=".ready-", dir=directory)
    try:
        os.write(handle, b"ok")
        os.fsync(handle)
    finally:
        os.close(handle)
        os.unlink(name)


def _broker() -> None:
    if settings.REDIS_URL:
        client = redis.Redis.from_url(
            settings.REDIS_URL,
            socket_connect_timeout=TIMEOUT_SECONDS,
            socket_timeout=TIMEOUT_SECONDS,
        )
        try:
            if not client.ping():
                raise ConnectionError("Redis did not answer PONG")
        finally:
            client.close()
    else:
        _writable(Path(settings.BROKER_DIR) / "queue")


def _data_dir() -> None:
    _writable(Path(settings.DATA_DIR))


CHECKS: dict[str, Callable[[], None]] = {
    "database": _database,
    "broker": _broker,
    "data_dir": _data_dir,
}


def readiness() -> dict[str, bool]:
    """Each check's name and whether it passed."""
    passed = {}
    for name, check in CHECKS.items():
        try:
            check()
            passed[name] = True
        except Exception as exc:
            # The exception's type only: its text may hold a host, a path or a URL.
            logger.warning("readiness check %s failed: %s", name, type(exc).__name__)
            passed[name] = False
    return passed
