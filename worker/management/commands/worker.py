"""``manage.py worker``: serve workspaces — apply their inbound events and deliver their effects.

By default a Celery worker (solo pool, one job at a time, late acks) consumes the doorbell queue
on the configured broker, with the worker loop beside it. ``--standalone`` runs only the loop,
polling the database, with no broker at all.
"""

from __future__ import annotations

import contextlib

from django.conf import settings
from django.core.management.base import BaseCommand

from worker.loop import Worker


class Command(BaseCommand):
    help = "Serve workspaces: take their leases, apply inbound events, deliver effects."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--standalone",
            action="store_true",
            help="no Celery consumer: poll the database only (a broker is not needed)",
        )
        parser.add_argument(
            "--workspace",
            action="append",
            dest="workspaces",
            metavar="SLUG",
            help="serve only these workspaces (repeatable); default: every workspace",
        )
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args, standalone: bool, workspaces: list[str] | None, loglevel: str, **_):
        if standalone:
            worker = Worker(workspaces=workspaces)
            self.stderr.write(f"ephyra worker {worker.owner} (standalone)")
            with contextlib.suppress(KeyboardInterrupt):
                worker.run_forever()
            return
        if workspaces:
            self.stderr.write("--workspace applies to --standalone only; Celery workers serve all")
        from ephyra.celery import app

        app.worker_main(
            [
                "worker",
                "--pool=solo",
                "--concurrency=1",
                f"--queues={settings.CELERY_TASK_DEFAULT_QUEUE}",
                f"--loglevel={loglevel}",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ]
        )
