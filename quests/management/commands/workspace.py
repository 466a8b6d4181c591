from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from quests.models import Workspace
from quests.workspaces import workspace_create, workspace_set_journal_remote


class Command(BaseCommand):
    help = "Register a repository as a workspace (mirrored under EPHYRA_DATA_DIR), or list them."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="mirror a repository and register it")
        add.add_argument("slug")
        add.add_argument("source", help="path or URL of the repository")
        add.add_argument(
            "--base", default="main", help="the base branch fixes land on (it must exist)"
        )
        add.add_argument("--name", default="")
        add.add_argument("--journal-remote", default="", help="where the journals are pushed")
        sub.add_parser("list", help="list workspaces")
        replica = sub.add_parser(
            "journal-remote", help="name where the worker pushes the journals ('' for nowhere)"
        )
        replica.add_argument("slug")
        replica.add_argument("remote", help="path or URL, without credentials")

    def handle(self, *args, **options):
        if options["action"] == "list":
            for ws in Workspace.objects.order_by("slug"):
                self.stdout.write(f"{ws.slug}\t{ws.base_branch}\t{ws.repository}")
            return
        if options["action"] == "journal-remote":
            ws = Workspace.objects.filter(slug=options["slug"]).first()
            if ws is None:
                raise CommandError(f"no workspace {options['slug']!r}")
            try:
                ws = workspace_set_journal_remote(ws, options["remote"], actor="command:workspace")
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            where = ws.journal_remote or "nowhere (this host's disk only)"
            self.stdout.write(f"workspace {ws.slug}: journals pushed to {where}")
            return
        if Workspace.objects.filter(slug=options["slug"]).exists():
            raise CommandError(f"workspace {options['slug']!r} already exists")
        source = options["source"]
        if Path(source).is_dir():
            # A path is kept as the remote the journals are pushed to: relative to nothing later.
            source = str(Path(source).resolve())
        try:
            ws = workspace_create(
                options["slug"],
                source,
                base_branch=options["base"],
                name=options["name"],
            )
            if options["journal_remote"]:
                ws = workspace_set_journal_remote(
                    ws, options["journal_remote"], actor="command:workspace"
                )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"workspace {ws.slug}: journals in {ws.repository}")
