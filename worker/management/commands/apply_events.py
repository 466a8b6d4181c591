"""``manage.py apply_events WORKSPACE FILE``: apply a file of events (JSON lines) through the
engine, or with ``--submit`` queue them for the worker that serves the workspace and print
each one's answer."""

import json
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from ephyra.replay import EventFileError, read_events
from ledger.inbound import EventConflict, submit_event, wait_for
from ledger.lease import LeaseHeld, holding
from ledger.models import InboundEvent
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
            "--submit",
            action="store_true",
            help="queue the events, in order and in one batch, for the workspace's worker",
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=60.0,
            help="with --submit: seconds to wait for the worker's answers (default 60; 0: do "
            "not wait, print what was queued)",
        )

    def handle(self, *args, **options):
        workspace = Workspace.objects.filter(slug=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"no workspace {options['workspace']!r}")
        try:
            with options["file"].open("rb") as handle:  # decoded line by line, file:line on error
                events = list(read_events(handle, str(options["file"])))
        except (OSError, EventFileError) as exc:
            raise CommandError(str(exc)) from None
        if options["submit"]:
            self._submit(workspace, events, options["wait"])
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

    def _submit(self, workspace: Workspace, events: list, wait: float) -> None:
        """One ordered batch (one transaction, so the worker sees all of it at once), then each
        event's answer as the worker gives it: accepted, absorbed, refused with the reason."""
        try:
            with transaction.atomic():
                rows = [
                    submit_event(workspace, event, source="manage.py apply_events")
                    for event in events
                ]
        except EventConflict as exc:
            raise CommandError(f"nothing was queued: {exc}") from None
        deadline = time.monotonic() + wait
        refused = pending = 0
        for row in rows:
            if wait > 0:
                wait_for(row, max(0.0, deadline - time.monotonic()))
            line = {"event": row.event_id, "quest": row.quest_id}
            if row.state == InboundEvent.State.PENDING:
                pending += 1
                line["outcome"] = "queued" if wait <= 0 else "pending"
            elif row.state == InboundEvent.State.APPLIED:
                line |= {"outcome": row.result.get("outcome"), "state": row.result.get("state")}
            else:
                refused += 1
                why = row.result.get("reason") or row.result.get("error", "")
                line |= {"outcome": str(row.state), "reason": why}
            self.stdout.write(json.dumps(line, sort_keys=True))
        if refused:
            raise CommandError(
                f"{refused} of {len(rows)} events were refused (manage.py ledger refused lists "
                "them again)",
                returncode=1,
            )
        if pending and wait > 0:
            raise CommandError(
                f"{pending} of {len(rows)} events are still queued after {wait:g} s: is a "
                "worker serving the workspace? (manage.py ledger status)",
                returncode=1,
            )
