"""``manage.py repair``: rebuild projections and missing ledger rows from the Git journals.

A workspace no worker serves is repaired here, under its lease. A workspace a worker serves is
repaired by that worker (the one writer): the command asks it, waits for its report and prints
it, and fails if the worker does not answer in time.

Apps above this one that keep projections of their own (missions) are repaired here too,
through a ``repair_workspace(workspace)`` method of their app config, which returns a report
with ``summary()`` (empty: nothing to say) and ``lines()``: this app may not import them.
"""

from __future__ import annotations

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from ledger.inbound import submit_repair, wait_for
from ledger.lease import LeaseHeld, fence_check, holding
from ledger.models import InboundEvent
from quests.models import Workspace
from quests.repair import RepairReport, repair_workspace


class Command(BaseCommand):
    help = (
        "Rebuild projections and missing ledger rows from the Git journals (idempotent). "
        "A workspace a worker serves is repaired by that worker; the command waits for it."
    )

    def add_arguments(self, parser):
        parser.add_argument("--workspace", help="only this workspace (slug)")
        parser.add_argument("--list", action="store_true", help="name what changed")
        parser.add_argument(
            "--check",
            action="store_true",
            help="say what a repair of the quests would change and change nothing (exit 1 if "
            "anything); read-only, with or without a worker",
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=60.0,
            help="seconds to wait for a serving worker's repair (default 60)",
        )

    def handle(self, *args, **options):
        workspaces = Workspace.objects.order_by("slug")
        if options["workspace"]:
            workspaces = workspaces.filter(slug=options["workspace"])
            if not workspaces.exists():
                raise CommandError(f"no workspace {options['workspace']!r}")
        if options["check"]:
            self._check(list(workspaces), options["list"])
            return
        report, unanswered, more = RepairReport(), [], []
        hooks = [
            config.repair_workspace
            for config in apps.get_app_configs()
            if callable(getattr(config, "repair_workspace", None))
        ]
        for workspace in workspaces:
            more += [(workspace.slug, hook(workspace)) for hook in hooks]
            try:
                with holding(workspace, "repair") as fence, transaction.atomic():
                    fence_check(fence)
                    repair_workspace(workspace, report)
            except LeaseHeld as held:
                row = wait_for(submit_repair(workspace, actor="manage.py repair"), options["wait"])
                if row.state != InboundEvent.State.APPLIED:
                    unanswered.append(
                        f"{workspace.slug}: worker {held.owner} serves it and did not repair it "
                        f"within {options['wait']:g} s; the request stays queued for it "
                        "(is the worker stuck? `manage.py ledger status` shows its heartbeat)"
                    )
                    continue
                report.workspaces += 1
                report.projections_created += row.result.get("created", [])
                report.projections_updated += row.result.get("updated", [])
                report.operations_created += row.result.get("operations", [])
                self.stdout.write(f"{workspace.slug}: repaired by worker {held.owner}")
        self.stdout.write(report.summary())
        if options["list"]:
            for label, items in (
                ("created", report.projections_created),
                ("updated", report.projections_updated),
                ("operation", report.operations_created),
            ):
                for item in items:
                    self.stdout.write(f"  {label}: {item}")
        for slug, extra in more:
            if not extra.summary():
                continue  # nothing of that app's in this workspace
            self.stdout.write(f"{slug}: {extra.summary()}")
            if options["list"]:
                for line in extra.lines():
                    self.stdout.write(line)
        if unanswered:
            raise CommandError("\n".join(unanswered), returncode=1)

    def _check(self, workspaces: list[Workspace], listing: bool) -> None:
        """The repair of each workspace's quests, inside a transaction that is rolled back:
        exactly what a repair would write, and nothing written (after a restore, say)."""
        report = RepairReport()
        for workspace in workspaces:
            with transaction.atomic():
                repair_workspace(workspace, report)
                transaction.set_rollback(True)
        self.stdout.write(f"{report.summary()} (checked only: nothing was written)")
        if listing:
            for item in report.projections_created + report.projections_updated:
                self.stdout.write(f"  projection: {item}")
            for item in report.operations_created:
                self.stdout.write(f"  operation: {item}")
        if report.changed:
            raise CommandError("the database is behind the journals: run manage.py repair")
