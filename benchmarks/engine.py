"""The engine's speed: events applied per second (decide + journal + projection + ledger +
audit), and repair's rate of rebuilding projections from the journals.

Runs against the database in DATABASE_URL (PostgreSQL in CI) or the embedded SQLite default,
in a throwaway test database created the way Django's test runner does.
Run: .venv/bin/python benchmarks/engine.py [--quests 200 --per-quest 10 --repair-quests 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from journal.store import Journal  # noqa: E402
from ledger.models import Operation  # noqa: E402
from quests.models import Quest, Workspace  # noqa: E402
from quests.repair import repair_workspace  # noqa: E402
from quests.services import quest_apply  # noqa: E402
from tests.core.story import BASE, HEAD, Story  # noqa: E402


def quest_events(quest_id: str, per_quest: int) -> list:
    story = Story(quest_id)
    line = [
        story.signal(fingerprint=f"fp-{quest_id}"),
        story("triage_decided", route="auto_fix", risk="low"),
        story("research_started"),
        story("hypothesis_written", summary="h"),
        story("checkpoint_decided", actor="ann", checkpoint="A", verdict="approve"),
        story("reproduction_recorded", probe="pytest -k x"),
        story("checkpoint_decided", actor="ann", checkpoint="B", verdict="approve"),
        story("patch_recorded", head=HEAD, base=BASE),
    ]
    while len(line) < per_quest:
        line.append(story("usage_recorded", source="agent", tokens=10))
    return line[:per_quest]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quests", type=int, default=200)
    parser.add_argument("--per-quest", type=int, default=10)
    parser.add_argument("--repair-quests", type=int, default=1000)
    args = parser.parse_args()

    old_name = connection.creation.create_test_db(verbosity=0, keepdb=False)
    try:
        with tempfile.TemporaryDirectory(prefix="ephyra-engine-bench-") as tmp:
            run(Path(tmp), args)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def run(tmp: Path, args: argparse.Namespace) -> None:
    print(f"# engine benchmark on {connection.vendor} ({connection.settings_dict['NAME']})")
    Journal.init(tmp / "apply.git")
    ws = Workspace.objects.create(slug="bench", name="bench", repository=str(tmp / "apply.git"))
    events = [e for i in range(args.quests) for e in quest_events(f"q{i:05d}", args.per_quest)]
    start = time.perf_counter()
    for event in events:
        quest_apply(ws, event)
    took = time.perf_counter() - start
    print()
    print("| measure | count | seconds | rate |")
    print("|---|---:|---:|---:|")
    print(f"| engine apply (one writer) | {len(events)} events | {took:.2f} | "
          f"{len(events) / took:,.0f} events/s |")  # fmt: skip

    # Repair: journals for many quests, projections and ledger wiped, rebuilt in batches.
    Journal.init(tmp / "repair.git")
    ws2 = Workspace.objects.create(slug="repair", name="r", repository=str(tmp / "repair.git"))
    for i in range(args.repair_quests):
        for event in quest_events(f"r{i:05d}", 3):
            quest_apply(ws2, event)
    for label in ("loose objects", "packed (git gc)"):
        if label.startswith("packed"):
            import subprocess

            subprocess.run(["git", "gc", "-q"], cwd=tmp / "repair.git", check=True)
        Quest.objects.filter(workspace=ws2).delete()
        Operation.objects.filter(workspace=ws2).delete()
        start = time.perf_counter()
        report = repair_workspace(ws2)
        took = time.perf_counter() - start
        assert len(report.projections_created) == args.repair_quests
        print(f"| repair from scratch, {label} | {args.repair_quests} quests, "
              f"{len(report.operations_created)} ledger rows | {took:.2f} | "
              f"{args.repair_quests / took:,.0f} quests/s |")  # fmt: skip
        start = time.perf_counter()
        again = repair_workspace(ws2)
        took = time.perf_counter() - start
        assert not again.changed
        print(f"| repair with nothing to do, {label} | {args.repair_quests} quests | "
              f"{took:.2f} | {args.repair_quests / took:,.0f} quests/s |")  # fmt: skip
    print()
    print("targets: engine apply >= 300 events/s on PostgreSQL; repair >= 5,000 quests/s")
    print("fsync: libgit2's default (off) for the journal; the database's own settings.")


if __name__ == "__main__":
    main()
