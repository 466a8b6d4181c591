from django.core.management.base import BaseCommand, CommandError

from quests.models import Workspace
from quests.repair import RepairReport, repair_all, repair_workspace


class Command(BaseCommand):
    help = "Rebuild projections and missing ledger rows from the Git journals (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", help="only this workspace (slug)")
        parser.add_argument("--list", action="store_true", help="name what changed")

    def handle(self, *args, **options):
        if options["workspace"]:
            workspace = Workspace.objects.filter(slug=options["workspace"]).first()
            if workspace is None:
                raise CommandError(f"no workspace {options['workspace']!r}")
            report = repair_workspace(workspace, RepairReport())
        else:
            report = repair_all()
        self.stdout.write(report.summary())
        if options["list"]:
            for label, items in (
                ("created", report.projections_created),
                ("updated", report.projections_updated),
                ("operation", report.operations_created),
            ):
                for item in items:
                    self.stdout.write(f"  {label}: {item}")
