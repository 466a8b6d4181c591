"""Benchmark: what pushing the journals to a journal remote costs the worker.

``.venv/bin/python benchmarks/replication.py [--signals N]``. For each mode (no journal remote,
``EPHYRA_JOURNAL_PUSH=sync``, ``EPHYRA_JOURNAL_PUSH=async``) a fresh process with its own data
directory and SQLite database submits N signals to a new workspace and times one in-process
``Worker.step()``. The step applies them in groups and delivers and feeds back their triage: a
transition per signal and one per outcome. The journal remote is a bare repository on the same
disk, so the figures are the push's own cost (a git process and a pack exchange per push),
with no network. The table also checks that the remote ends equal to the mirror.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(signals: int, mode: str) -> dict:
    """In this process (its environment set by ``main``): time the worker on ``signals``."""
    import django

    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "ephyra.settings"
    django.setup()
    from django.core.management import call_command

    from journal.store import Journal
    from ledger.inbound import submit_event
    from quests.models import Workspace
    from tests.core.story import Story
    from worker.loop import Worker

    call_command("migrate", verbosity=0)
    data = Path(os.environ["EPHYRA_DATA_DIR"])
    remote = data / "remote.git" if mode != "none" else None
    Journal.init(data / "mirror.git", bare=True)
    if remote is not None:
        Journal.init(remote, bare=True)
    ws = Workspace.objects.create(
        slug="bench", name="bench", repository=str(data / "mirror.git"),
        journal_remote=str(remote or ""),
    )  # fmt: skip
    for i in range(signals):
        submit_event(ws, Story(f"q{i}").signal(), source="bench")
    worker = Worker(owner="bench")
    started = time.perf_counter()
    worker.step()
    seconds = time.perf_counter() - started
    same = None
    if remote is not None:
        heads = [
            subprocess.run(
                ["git", "--git-dir", str(path), "for-each-ref", "refs/ephyra/"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            for path in (data / "mirror.git", remote)
        ]
        same = heads[0] == heads[1]
    return {"mode": mode, "seconds": seconds, "same": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--signals", type=int, default=200)
    parser.add_argument("--one", choices=["none", "sync", "async"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.signals, args.one)))
        return
    rows = []
    for mode in ("none", "sync", "async"):
        with tempfile.TemporaryDirectory() as tmp:
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("EPHYRA_")},
                "EPHYRA_DATA_DIR": tmp, "SECRET_KEY": "benchmark-only", "EPHYRA_DOORBELL": "false",
                "EPHYRA_JOURNAL_PUSH": "sync" if mode == "none" else mode,
                "EPHYRA_LEASE_MS": "3600000",  # one long step, no heartbeat thread
            }  # fmt: skip
            env.pop("DATABASE_URL", None)
            done = subprocess.run(
                [sys.executable, __file__, "--signals", str(args.signals), "--one", mode],
                env=env, capture_output=True, text=True, check=True, cwd=ROOT,
            )  # fmt: skip
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{args.signals} signals and their triage, one Worker.step(), SQLite, local remote")
    print("| journal remote | seconds | transitions/s | remote equals mirror |")
    print("|---|---:|---:|---|")
    for row in rows:
        rate = 2 * args.signals / row["seconds"]
        same = "n/a" if row["same"] is None else ("yes" if row["same"] else "NO")
        print(f"| {row['mode']} | {row['seconds']:.1f} | {rate:.0f} | {same} |")
    if any(row["same"] is False for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
