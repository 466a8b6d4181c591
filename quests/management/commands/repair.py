from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from ledger.lease import LeaseHeld, fence_check, holding
from quests.models import Workspace
from quests.repair import RepairReport, repair_workspace


class Command(BaseCommand):
    help = (
        "Rebuild projections and missing ledger rows from the Git journals (idempotent). "
        "Workers do this when they take a workspace; a workspace a worker serves is skipped."
    )

    def add_arguments(self, parser):
        parser.add_argument("--workspace", help="only this workspace (slug)")
        parser.add_argument("--list", action="store_true", help="name what changed")

    def handle(self, *args, **options):
        workspaces = Workspace.objects.order_by("slug")
        if options["workspace"]:
            workspaces = workspaces.filter(slug=options["workspace"])
            if not workspaces.exists():
                raise CommandError(f"no workspace {options['workspace']!r}")
        report, skipped = RepairReport(), []
        for workspace in workspaces:
            try:
                with holding(workspace, "repair") as fence, transaction.atomic():
                    fence_check(fence)
                    repair_workspace(workspace, report)
            except LeaseHeld as exc:
                skipped.append(str(exc))
        self.stdout.write(report.summary())
        for reason in skipped:
            self.stderr.write(f"skipped: {reason}")
        if skipped and options["workspace"]:
            raise CommandError(skipped[0])
        if options["list"]:
            for label, items in (
                ("created", report.projections_created),
                ("updated", report.projections_updated),
                ("operation", report.operations_created),
            ):
                for item in items:
                    self.stdout.write(f"  {label}: {item}")
