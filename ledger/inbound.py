"""Inbound events: how a process that does not hold a workspace's lease changes a quest.

Web requests, webhooks and commands submit events here; the workspace's worker applies them in
arrival order through the engine, under its fence. Submission is idempotent by event id, so a
redelivered webhook or a retried request is stored once.
"""

from __future__ import annotations

import hashlib
import logging
import time

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from ephyra.core.events import BaseEvent, event_to_dict
from ephyra.sql import insert_rows
from ledger.models import InboundEvent

log = logging.getLogger(__name__)


class EventConflict(ValueError):
    """A different event was submitted earlier under the same id."""


def submit_event(
    workspace, event: BaseEvent, *, source: str, expect_head: str = ""
) -> InboundEvent:
    """Store ``event`` for the workspace's worker and ring its doorbell once the surrounding
    transaction commits. A second submission of the same event returns the first row; a
    different event under an id already taken raises ``EventConflict``.

    ``expect_head``: the quest's journal head the submitter saw; the worker refuses the event
    if the quest moved on from it (a person's action is a compare-and-swap on the quest)."""
    values = _values(event, source)
    try:
        with transaction.atomic():
            row = InboundEvent.objects.create(
                workspace=workspace, expect_head=expect_head, **values
            )
    except IntegrityError:
        row = InboundEvent.objects.get(workspace=workspace, event_id=event.id)
        if _content(row.payload) != _content(values["payload"]):
            raise EventConflict(
                f"event id {event.id} was taken by another event ({row.type}, from "
                f"{row.source}, received {row.received_at:%Y-%m-%d %H:%M:%S}); an event id "
                "names one event"
            ) from None
        return row
    transaction.on_commit(lambda: ring(workspace.pk))
    return row


def _content(payload: dict) -> dict:
    # The time a retried submission was made may differ; what happened may not.
    return {k: v for k, v in payload.items() if k != "at"}


def submit_events(workspace, events: list[BaseEvent], *, source: str) -> None:
    """``submit_event`` for many events at once, in their order: stored together (COPY on
    PostgreSQL; an event id already stored is left as it is) with one doorbell. For intake,
    whose exports carry up to thousands of events: a savepoint and an INSERT each cost more
    than all the rest of storing them."""
    if not events:
        return
    # Values, not model instances: the defaults (received_at and the rest) are made once for
    # all the rows, and building a thousand instances cost as much as storing them.
    rows = [_values(event, source) for event in events]
    insert_rows(InboundEvent, workspace, rows, ignore_conflicts=True)
    transaction.on_commit(lambda: ring(workspace.pk))


def _values(event: BaseEvent, source: str) -> dict:
    return {
        "event_id": event.id,
        "quest_id": event.quest,
        "type": event.type,  # type: ignore[attr-defined]
        "payload": event_to_dict(event),
        "source": source,
    }


RESOLVE = "operation.resolve"
REPAIR = "workspace.repair"
# Requests to the worker that are not quest events: each is applied alone, in arrival order.
REQUESTS = frozenset({RESOLVE, REPAIR})


def submit_resolution(
    workspace, key: str, status: str, *, actor: str, note: str = "", event_id: str = ""
) -> InboundEvent:
    """A person's verdict on an ambiguous or dead operation (``succeeded``, ``failed``, or
    ``absent`` to deliver it again), for the worker to apply under its fence and audit.

    ``event_id``: the caller's idempotent id for the request (the action layer derives it from
    a form's token); the same id again returns the first row. Blank: a fresh id each time."""
    if status not in {"succeeded", "failed", "absent"}:
        raise ValueError(f"a resolution is succeeded, failed or absent, not {status!r}")
    at = timezone.now()
    if not event_id:
        digest = hashlib.sha256(f"{key}|{status}|{actor}|{at.isoformat()}".encode()).hexdigest()
        event_id = f"resolve-{digest[:24]}"
    try:
        with transaction.atomic():
            row = InboundEvent.objects.create(
                workspace=workspace,
                event_id=event_id,
                quest_id=key.split(":", 1)[0],
                type=RESOLVE,
                payload={"key": key, "status": status, "actor": actor, "note": note},
                source=actor,
                received_at=at,
            )
    except IntegrityError:  # the same request, submitted twice at once
        return InboundEvent.objects.get(workspace=workspace, event_id=event_id)
    transaction.on_commit(lambda: ring(workspace.pk))
    return row


def submit_repair(workspace, *, actor: str) -> InboundEvent:
    """Ask the worker that serves the workspace to repair it from the journals (a command may
    not repair what a worker is writing); its report comes back in the row's result."""
    at = timezone.now()
    digest = hashlib.sha256(f"repair|{actor}|{at.isoformat()}".encode()).hexdigest()
    row = InboundEvent.objects.create(
        workspace=workspace,
        event_id=f"repair-{digest[:24]}",
        quest_id="",
        type=REPAIR,
        payload={"actor": actor},
        source=actor,
        received_at=at,
    )
    transaction.on_commit(lambda: ring(workspace.pk))
    return row


def wait_for(row: InboundEvent, timeout: float, interval: float = 0.05) -> InboundEvent:
    """Wait up to ``timeout`` seconds for the worker to answer a submitted row (applied,
    refused or dead); the row as it then is, still pending if the worker has not answered."""
    deadline = time.monotonic() + timeout
    while True:
        row.refresh_from_db(fields=["state", "result", "applied_at"])
        if row.state != InboundEvent.State.PENDING or time.monotonic() >= deadline:
            return row
        time.sleep(interval)


def ring(workspace_id: int) -> None:
    """Tell the workers that a workspace has work. Only a doorbell: a lost ring costs latency,
    never work, because the lease holder also polls the database on every heartbeat."""
    if not settings.EPHYRA_DOORBELL:
        return
    from ephyra.celery import app

    try:
        app.send_task("worker.ring", args=[workspace_id], queue=settings.CELERY_TASK_DEFAULT_QUEUE)
    except Exception:  # the broker being down must not fail the request
        log.warning("could not ring the doorbell of workspace %s", workspace_id, exc_info=True)
