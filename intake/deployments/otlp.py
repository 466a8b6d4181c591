"""A deployment seen in telemetry: the first signal of a commit is its deployment.

A service that names the commit it runs in a resource attribute (``service.version`` or
``vcs.ref.head.revision`` by default; the setting ``EPHYRA_OTLP_VERSION_ATTRIBUTES`` lists
them) tells Ephyra, with its first error, that this commit is deployed in its environment
(``deployment.environment.name``; production when it names none). Only a full commit id counts:
``1.4.2`` is a version, not a commit, and costs nothing here (no query). A commit this process
has recorded already is remembered, so a busy service asks the database once, not per export.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.db import transaction

from ephyra.telemetry import SignalCandidate
from intake.deployments.services import deployment_record

COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
SERVICE_VERSION = "service.version"
_REMEMBERED = 4096
_seen: set[tuple[int, str, str]] = set()
_seen_lock = threading.Lock()


def running_commits(
    candidates: Iterable[SignalCandidate], attributes: Iterable[str]
) -> dict[tuple[str, str], datetime | None]:
    """``(commit, environment)`` → the earliest time a candidate of it carries, for each
    commit the candidates' resources name in one of ``attributes``."""
    names = tuple(attributes)
    found: dict[tuple[str, str], datetime | None] = {}
    for candidate in candidates:
        for name in names:
            value = candidate.resource.get(name, "")
            if not value and name == SERVICE_VERSION:
                value = candidate.service_version
            value = value.strip().lower()
            if not COMMIT.fullmatch(value):
                continue
            key = (value, candidate.environment.strip() or "production")
            at = candidate.at
            if key not in found or (at is not None and (found[key] or at) >= at):
                found[key] = at
            break  # the first attribute that names a commit is the one
    return found


def deployments_from_signals(
    workspace, candidates: Iterable[SignalCandidate], received_at: datetime
) -> int:
    """Record the deployment of each commit these signals are the first of; how many new."""
    found = running_commits(candidates, settings.EPHYRA_OTLP_VERSION_ATTRIBUTES)
    recorded = 0
    for (commit, environment), at in sorted(found.items()):
        key = (workspace.pk, commit, environment)
        with _seen_lock:
            if key in _seen:
                continue
        recorded += deployment_record(
            workspace,
            commit=commit,
            environment=environment,
            source="otlp",
            at=min(at, received_at) if at else received_at,
            actor="ephyra:otlp",
        ).created
        # Remembered once the export's transaction commits: one rolled back recorded nothing.
        transaction.on_commit(lambda key=key: _remember(key))
    return recorded


def _remember(key: tuple[int, str, str]) -> None:
    with _seen_lock:
        if len(_seen) >= _REMEMBERED:
            _seen.clear()
        _seen.add(key)
