from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ephyra.policy import DEFAULT_POLICY_PATH
from ephyra.replay import EXIT_INVALID, EXIT_OK, replay_file, report_invalid, write_decisions
from journal.apply import first_mismatch, replay_journal
from quests.models import Workspace
from quests.workspaces import workspace_journal, workspace_policy


class Command(BaseCommand):
    help = (
        "Fold events through the quest machine and print each decision: from a JSON-lines "
        "FILE, or from a quest's journal (--workspace W --quest Q), checking it against Git."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path, nargs="?", help="events as JSON lines")
        parser.add_argument("--policy", type=Path, default=None, help="autonomy policy (YAML)")
        parser.add_argument("--workspace", help="replay a journal of this workspace (slug)")
        parser.add_argument("--quest", help="the quest id whose journal to replay")

    def handle(self, *args, **options):
        if options["workspace"] or options["quest"]:
            return self._journal(options)
        if options["file"] is None:
            raise CommandError("give a FILE, or --workspace and --quest")
        policy = options["policy"] or DEFAULT_POLICY_PATH
        code = replay_file(options["file"], policy, self.stdout, self.stderr)
        if code == EXIT_INVALID:
            raise CommandError("replay stopped at an invalid transition", returncode=code)
        if code != EXIT_OK:
            raise CommandError("replay could not read its input", returncode=code)

    def _journal(self, options):
        if not (options["workspace"] and options["quest"]):
            raise CommandError("--workspace and --quest go together")
        workspace = Workspace.objects.filter(slug=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"no workspace {options['workspace']!r}")
        journal = workspace_journal(workspace)
        if journal.head(options["quest"]) is None:
            raise CommandError(f"no journal for quest {options['quest']!r}")
        policy = workspace_policy(workspace)
        replayed = replay_journal(journal, options["quest"], policy)
        write_decisions(replayed.fold, self.stdout)
        if report_invalid(replayed.fold, self.stderr) != EXIT_OK:
            raise CommandError("the journal holds an invalid transition", returncode=EXIT_INVALID)
        if not replayed.matches:
            problem = first_mismatch(journal, options["quest"], policy)
            raise CommandError(f"the journal does not match its replay: {problem}", returncode=1)
        self.stderr.write(f"replayed {len(replayed.fold.decisions)} events: matches the journal")
