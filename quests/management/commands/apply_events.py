import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ephyra.replay import EventFileError, read_events
from quests.models import Workspace
from quests.services import quest_apply


class Command(BaseCommand):
    help = (
        "Apply events (JSON lines) to a workspace through the engine: journal, projection, ledger."
    )

    def add_arguments(self, parser):
        parser.add_argument("workspace", help="workspace slug")
        parser.add_argument("file", type=Path)

    def handle(self, *args, **options):
        workspace = Workspace.objects.filter(slug=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"no workspace {options['workspace']!r}")
        try:
            with options["file"].open(encoding="utf-8") as handle:
                events = list(read_events(handle, str(options["file"])))
        except (OSError, EventFileError) as exc:
            raise CommandError(str(exc)) from None
        refused = 0
        for event in events:
            outcome = quest_apply(workspace, event)
            decision = outcome.applied.decision
            refused += decision.outcome == "refused"
            line = decision.to_dict() | {"head": str(outcome.applied.head or "")}
            self.stdout.write(json.dumps(line, sort_keys=True))
        if refused:
            raise CommandError(f"{refused} of {len(events)} events were refused", returncode=1)
