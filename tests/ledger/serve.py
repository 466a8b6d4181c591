"""A standalone worker process that reports its counters, for tests that race two workers.

``python -m tests.ledger.serve --workspace SLUG`` runs the same loop as
``manage.py worker --standalone --workspace SLUG`` (``worker.loop.Worker.run_forever``) and
prints one JSON line on stdout whenever its counters change: its owner identity, the work it
did, and how many of its fenced writes were refused (``Worker.refused``). Those counters live
in the process; this is how a test outside it sees them. SIGTERM stops it cleanly.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", action="append", required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ephyra.settings")
    import django

    django.setup()
    from worker.loop import Worker

    worker = Worker(workspaces=args.workspace)

    def report() -> str:
        counts = dataclasses.asdict(worker.counts)
        return json.dumps({"owner": worker.owner, "refused": worker.refused, "counts": counts})

    def watch() -> None:
        last = ""
        while True:
            line = report()
            if line != last:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
                last = line
            if worker.stopping.wait(0.02):
                return

    def stop(*_) -> None:
        worker.stopping.set()
        worker.wake.set()

    signal.signal(signal.SIGTERM, stop)
    watcher = threading.Thread(target=watch, name="ephyra-serve-report", daemon=True)
    watcher.start()
    worker.run_forever()
    watcher.join(timeout=5)
    sys.stdout.write(report() + "\n")


if __name__ == "__main__":
    main()
