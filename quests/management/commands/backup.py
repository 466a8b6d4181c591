"""``manage.py backup DIR``: the database, every workspace's journals and audit anchors, and a
manifest with their SHA-256 (quests/backup.py; docs/operations.md, "Backup and restore")."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from quests.backup import BackupError, backup


class Command(BaseCommand):
    help = "Back up the database and every workspace's journals into a new directory."

    def add_arguments(self, parser):
        parser.add_argument("directory", help="a new or empty directory")

    def handle(self, *args, **options):
        try:
            report = backup(Path(options["directory"]))
        except BackupError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(report.summary())
