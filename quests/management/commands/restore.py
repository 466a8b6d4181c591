"""``manage.py restore DIR``: a backup onto an empty install, after checking every digest
(quests/backup.py; docs/operations.md, "Backup and restore")."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from quests.backup import BackupError, restore


class Command(BaseCommand):
    help = "Restore a backup (manage.py backup) onto an empty database and data directory."

    def add_arguments(self, parser):
        parser.add_argument("directory", help="the backup's directory")

    def handle(self, *args, **options):
        try:
            report = restore(Path(options["directory"]))
        except BackupError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(report.summary())
