import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ephyra.replay import EventFileError, read_events
from ledger.inbound import submit_event
from ledger.lease import LeaseHeld, holding
from quests.models import Workspace
from worker.delivery import fenced_apply


class Command(BaseCommand):
    help = (
        "Apply events (JSON lines) to a workspace through the engine: journal, projection, ledger. "
        "The command takes the workspace's lease while it runs; with --submit it queues the "
        "events for the worker that serves the workspace instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("workspace", help="workspace slug")
        parser.add_argument("file", type=Path)
        parser.add_argument(
            "--submit", action="store_true", help="queue the events for the workspace's worker"
        )

    def handle(self, *args, **options):
        workspace = Workspace.objects.filter(slug=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"no workspace {options['workspace']!r}")
        try:
            with options["file"].open(encoding="utf-8") as handle:
                events = list(read_events(handle, str(options["file"])))
        except (OSError, EventFileError) as exc:
            raise CommandError(str(exc)) from None
        if options["submit"]:
            for event in events:
                row = submit_event(workspace, event, source="manage.py apply_events")
                self.stdout.write(json.dumps({"event": event.id, "queued": row.state}))
            return
        refused = 0
        try:
            with holding(workspace, "apply_events") as fence:
                for event in events:
                    outcome = fenced_apply(fence, workspace, event)
                    decision = outcome.applied.decision
                    refused += decision.outcome == "refused"
                    line = decision.to_dict() | {"head": str(outcome.applied.head or "")}
                    self.stdout.write(json.dumps(line, sort_keys=True))
        except LeaseHeld as exc:
            raise CommandError(str(exc)) from None
        if refused:
            raise CommandError(f"{refused} of {len(events)} events were refused", returncode=1)
