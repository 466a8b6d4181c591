"""Celery: the doorbell task and the worker's life cycle.

A Celery worker process started for Ephyra (``manage.py worker`` or ``celery -A ephyra worker``)
runs one ``worker.loop.Worker`` beside its consumer. The ``worker.ring`` message only wakes it:
the ledger and the journal hold the work, so a lost, repeated or late message changes nothing.
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown

from worker.loop import Worker

log = logging.getLogger(__name__)
_worker: Worker | None = None


@shared_task(name="worker.ring", ignore_result=True)
def ring(workspace_id: int) -> None:
    if _worker is not None:
        _worker.wake.set()


@worker_ready.connect
def _start(**_) -> None:
    global _worker
    _worker = Worker()
    _worker.start()
    log.info("ephyra worker %s started", _worker.owner)


@worker_shutdown.connect
def _stop(**_) -> None:
    if _worker is not None:
        _worker.stop()
