"""``manage.py demo``: run the demo against a running Ephyra (``make run``); docs/demo.md."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from demo.follow import DemoFailed
from demo.run import Demo, Options
from demo.service import SCENARIOS


def default_url() -> str:
    # `make run` serves on EPHYRA_ADDR (127.0.0.1:8000 unless set): the demo looks there too.
    return f"http://{os.environ.get('EPHYRA_ADDR') or '127.0.0.1:8000'}"


class Command(BaseCommand):
    help = (
        "Generate a small web service with a regression, run it as production exporting to "
        "Ephyra, and follow the quest that fixes it from signal to closed."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--approve-as",
            metavar="USER",
            help="approve each checkpoint as USER (made a reviewer of the demo's workspace); "
            "without it a person approves on the quest's page",
        )
        parser.add_argument(
            "--scenario",
            choices=SCENARIOS,
            default="main",
            help="main: the fix lands and the quest closes; rollback: the fix breaks another "
            "feature, Ephyra rolls it back and researches again",
        )
        parser.add_argument(
            "--url", default=default_url(), help="where Ephyra serves (default: %(default)s)"
        )
        parser.add_argument(
            "--keep",
            action="store_true",
            help="leave production running and the demo's files in place at the end",
        )
        parser.add_argument(
            "--with-worker",
            action="store_true",
            help="run a worker inside the demo (when no worker runs beside the server)",
        )
        parser.add_argument(
            "--watch-minutes", type=int, default=1, help="the policy's watch window (minutes)"
        )
        parser.add_argument(
            "--timeout", type=float, default=900, help="give up after this many seconds"
        )

    def handle(self, *args, **options) -> None:
        if options["watch_minutes"] < 1:
            raise CommandError("--watch-minutes: at least 1")
        chosen = Options(
            scenario=options["scenario"],
            url=options["url"],
            approve_as=options["approve_as"],
            keep=options["keep"],
            timeout=options["timeout"],
            watch_minutes=options["watch_minutes"],
        )
        demo = Demo(chosen, write=self.say)
        # A `kill` (or a test's timeout) stops the demo as Ctrl-C does: production and the
        # worker it started are stopped on the way out.
        signal.signal(signal.SIGTERM, _interrupt)
        worker = start_worker() if options["with_worker"] else None
        try:
            demo.run()
        except DemoFailed as failed:
            raise CommandError(str(failed)) from None
        except KeyboardInterrupt:
            raise CommandError("interrupted: production is stopped") from None
        finally:
            if worker is not None:
                stop_worker(worker)


    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()  # each step as it happens, into a pipe or a file too


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def start_worker() -> subprocess.Popen:
    """A worker of its own, as `make run` starts one: `manage.py worker --standalone`."""
    return subprocess.Popen(
        [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "worker", "--standalone"],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop_worker(worker: subprocess.Popen) -> None:
    os.killpg(worker.pid, signal.SIGINT)
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
