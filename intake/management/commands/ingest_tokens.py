from django.core.management.base import BaseCommand, CommandError

from intake.otlp.models import IngestToken
from intake.otlp.tokens import token_create
from quests.models import Workspace


class Command(BaseCommand):
    help = "Make the bearer tokens OpenTelemetry exporters send to /v1/logs and /v1/traces."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="make a token; it is printed once and not kept")
        add.add_argument("workspace")
        add.add_argument("--name", default="", help="what the token is for (a service, a host)")
        listing = sub.add_parser("list", help="list tokens (their prefixes, never the tokens)")
        listing.add_argument("--workspace", default=None)

    def handle(self, *args, **options):
        if options["action"] == "list":
            rows = IngestToken.objects.select_related("workspace").order_by("workspace__slug", "pk")
            if options["workspace"]:
                rows = rows.filter(workspace__slug=options["workspace"])
            for row in rows:
                state = "active" if row.active else "inactive"
                self.stdout.write(
                    f"{row.workspace.slug}\t{row.prefix}…\t{row.name or '-'}\t{state}\t"
                    f"{row.created_at:%Y-%m-%d %H:%M}"
                )
            return
        workspace = Workspace.objects.filter(slug=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"no workspace {options['workspace']!r}")
        row, token = token_create(workspace, name=options["name"])
        self.stdout.write(f"ingest token for {workspace.slug} (shown once; keep it secret):")
        self.stdout.write(token)
        self.stdout.write(
            f'OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer {token}"', style_func=None
        )
