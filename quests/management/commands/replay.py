from django.core.management.base import BaseCommand, CommandError

from ephyra.replay import EXIT_INVALID, EXIT_OK, build_parser, replay_file


class Command(BaseCommand):
    help = "Fold events (JSON lines) through the quest machine and print each decision."

    def add_arguments(self, parser):
        build_parser(parser)

    def handle(self, *args, **options):
        code = replay_file(options["file"], options["policy"], self.stdout, self.stderr)
        if code == EXIT_INVALID:
            raise CommandError("replay stopped at an invalid transition", returncode=code)
        if code != EXIT_OK:
            raise CommandError("replay could not read its input", returncode=code)
