"""``manage.py deployed WORKSPACE COMMIT [--environment production]``: a CI/CD step's report
that COMMIT now runs in an environment (docs/work.md, "Deployments")."""

import re

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from intake.deployments.services import deployment_record, mirror_fetch
from quests.models import Workspace
from quests.workspaces import commit_of

FULL = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


class Command(BaseCommand):
    help = (
        "Report that COMMIT is deployed to an environment: the watching quests whose landed "
        "commit it carries start (or move) their watch. Fetches the workspace's remote first."
    )

    def add_arguments(self, parser):
        parser.add_argument("workspace")
        parser.add_argument(
            "commit", help="the commit deployed (its full id, or one the mirror knows)"
        )
        parser.add_argument("--environment", default="production")

    def handle(self, *args, **options):
        workspace = Workspace.objects.filter(slug=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"no workspace {options['workspace']!r}")
        problem = mirror_fetch(workspace)
        if problem:
            self.stderr.write(f"{problem}; deciding with what the mirror has")
        commit = _resolve(workspace, options["commit"].strip())
        recorded = deployment_record(
            workspace,
            commit=commit,
            environment=options["environment"],
            source="command",
            at=timezone.now(),
            actor="ephyra:command",
        )
        row = recorded.deployment
        said = "recorded" if recorded.created else "already recorded"
        self.stdout.write(
            f"deployment of {row.commit} to {row.environment} {said}: {row.state}, {row.reason}"
        )


def _resolve(workspace: Workspace, given: str) -> str:
    """The full commit id ``given`` names: a full id as it is (the mirror may not have it
    yet: the deployment then waits for it), else what the mirror resolves it to."""
    if FULL.fullmatch(given.lower()):
        return given.lower()
    if found := commit_of(workspace, given):
        return found
    raise CommandError(
        f"{given!r} is not a commit of {workspace.slug}: give the full commit id that was deployed"
    )
