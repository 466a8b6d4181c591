from django.core.management.base import BaseCommand, CommandError

from journal.errors import JournalError
from journal.remote import PushRejected, fetch, push
from quests.models import Workspace
from quests.workspaces import workspace_journal


class Command(BaseCommand):
    help = "Push or fetch a workspace's journals (refs/ephyra/*) to or from its remote."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["push", "fetch"])
        parser.add_argument("workspace", help="workspace slug")
        parser.add_argument(
            "--remote", help="instead of the workspace's journal remote (or its source remote)"
        )

    def handle(self, *args, **options):
        workspace = Workspace.objects.filter(slug=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"no workspace {options['workspace']!r}")
        remote = options["remote"] or workspace.journal_remote or workspace.remote
        if not remote:
            raise CommandError(f"workspace {workspace.slug!r} has no remote; pass --remote")
        journal = workspace_journal(workspace)
        try:
            if options["action"] == "push":
                done = push(journal, remote)
                self.stdout.write(
                    f"pushed to {remote}: {len(done.created)} new, {len(done.updated)} updated, "
                    f"{len(done.unchanged)} unchanged"
                )
                return
            got = fetch(journal, remote)
        except PushRejected as exc:
            # seed: a rejected push is a conflict, never an overwrite; fetch and look.
            raise CommandError(f"{exc}; fetch, then reconcile the diverged quests") from None
        except JournalError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"fetched from {remote}: {len(got.created)} new, {len(got.fast_forwarded)} moved "
            f"forward, {len(got.unchanged)} unchanged, {len(got.ahead)} ahead (push them), "
            f"{len(got.diverged)} diverged: {', '.join(got.diverged) or 'none'}"
        )
