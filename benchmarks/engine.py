"""The engine's speed: events applied per second (decide + journal + projection + ledger +
audit), and repair's rate of rebuilding projections from the journals.

Events are applied two ways: one at a time, each in its own transaction (``quest_apply``, what
a command or a test does), and as the worker takes its queue (``Worker.take_inbound``: the
events were submitted beforehand, untimed, as web requests and webhooks submit them; the worker
applies them in groups of distinct quests, one fenced transaction and one commit a group, each
row marked applied in it). Each quest's events are queued together, ten in a row, so a group
holds one event of each of the quests in the worker's window.

Runs against the database in DATABASE_URL (PostgreSQL in CI) or the embedded SQLite default,
in a throwaway test database created the way Django's test runner does. Every rate is given
twice: by the clock, and by this process's CPU time (the machine may be shared; the database
server's own CPU is in the first only). What each event costs is counted too: statements sent
to the database (on PostgreSQL, round trips), loose objects and refs written to Git.
Run: .venv/bin/python benchmarks/engine.py [--quests 200 --per-quest 10 --fsync-quests 50
     --repair-quests 1000 --dir DIR --profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

import pygit2  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from journal.anchor import anchor_history  # noqa: E402
from journal.store import Journal  # noqa: E402
from ledger.inbound import submit_event  # noqa: E402
from ledger.lease import lease_acquire  # noqa: E402
from ledger.models import InboundEvent, Operation  # noqa: E402
from quests import workspaces  # noqa: E402
from quests.engine import quest_apply  # noqa: E402
from quests.models import Quest, Workspace  # noqa: E402
from quests.repair import repair_workspace  # noqa: E402
from tests.core.story import BASE, HEAD, Story  # noqa: E402
from worker.loop import Worker  # noqa: E402

APPLY_TARGET, REPAIR_TARGET = 300, 5000
# Repair from scratch takes a fifth of a second: one round is at the mercy of whatever else the
# machine does then, so each layout is repaired this many times and the median round is shown.
ROUNDS = 5
spread: list[str] = []  # each layout's rounds, quests/s by the clock


def forget_journals() -> None:
    """Drop this thread's open journals (``quests.workspaces`` keeps one per thread), as a
    restarted process would have: repair is measured from cold."""
    workspaces._journals.__dict__.pop("by_path", None)


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
    parser.add_argument("--fsync-quests", type=int, default=50, help="quests, journal fsync on")
    parser.add_argument("--repair-quests", type=int, default=1000)
    parser.add_argument("--dir", help="where the journals go (default: the system's temp dir)")
    parser.add_argument("--profile", action="store_true", help="CPU profile of applying events")
    args = parser.parse_args()

    old_name = connection.creation.create_test_db(verbosity=0, keepdb=False)
    try:
        with tempfile.TemporaryDirectory(prefix="ephyra-engine-bench-", dir=args.dir) as tmp:
            run(Path(tmp), args)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def database_durability() -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            shown = []
            for name in ("fsync", "synchronous_commit", "wal_sync_method"):
                cursor.execute(f"SHOW {name}")
                shown.append(f"{name}={cursor.fetchone()[0]}")
            return ", ".join(shown)
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA synchronous")
            level = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[cursor.fetchone()[0]]
            cursor.execute("PRAGMA journal_mode")
            return f"PRAGMA synchronous={level}, journal_mode={cursor.fetchone()[0]}"
    return "unknown"


def new_workspace(tmp: Path, slug: str, *, fsync: bool) -> Workspace:
    journal = Journal.init(tmp / f"{slug}.git")
    if fsync:  # libgit2 then fsyncs each loose object, each ref and their directories
        journal.repo.config["core.fsyncObjectFiles"] = True
    return Workspace.objects.create(slug=slug, name=slug, repository=journal.path)


def loose_objects(repository: str) -> int:
    objects = Path(repository) / "objects"
    return sum(1 for d in objects.iterdir() if len(d.name) == 2 for _ in d.iterdir())


class Row:
    def __init__(self, measure, fsync, count, wall, cpu, units, target=None, n=None):
        self.cells = [measure, fsync, count, f"{wall:.2f}", f"{cpu:.2f}"]
        n = n if n is not None else int(count.split()[0])
        self.cells += [f"{n / wall:,.0f} {units}/s", f"{n / cpu:,.0f} {units}/s"]
        self.cells.append(f"{n / wall / target:.2f}" if target else "")


def timed(work) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def applier(ws: Workspace, events: list, queued: bool) -> Callable[[], None]:
    """The work of applying ``events``: one at a time through ``quest_apply``, or (``queued``)
    as the worker takes its queue; the events are then submitted here, beforehand, as web
    requests and webhooks submit them, which is not part of the work."""
    if not queued:

        def one_by_one() -> None:
            for event in events:
                quest_apply(ws, event)

        return one_by_one
    for event in events:
        submit_event(ws, event, source="benchmark")
    fence, worker = lease_acquire(ws.pk, "benchmark"), Worker(owner="benchmark")

    def drain() -> None:
        while worker.take_inbound(fence, ws):
            pass

    return drain


def apply_run(
    tmp: Path, slug: str, quests: int, per: int, fsync: bool, profile: bool, queued: bool = False
) -> Row:
    ws = new_workspace(tmp, slug, fsync=fsync)
    events = [e for i in range(quests) for e in quest_events(f"q{i:05d}", per)]
    profiler = cProfile.Profile(time.process_time) if profile else None
    apply = applier(ws, events, queued)

    def work() -> None:
        if profiler:
            profiler.enable()
        apply()
        if profiler:
            profiler.disable()

    wall, cpu = timed(work)
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    if queued:
        applied = InboundEvent.objects.filter(workspace=ws, state=InboundEvent.State.APPLIED)
        assert applied.count() == len(events), "the worker left events behind"
    label = "on" if fsync else "off"
    how = "worker, queued events in groups" if queued else "one event a transaction"
    return Row(f"engine apply, {how}", label, f"{len(events)} events", wall, cpu, "events",
               APPLY_TARGET)  # fmt: skip


def pack_files(repository: str) -> int:
    return sum(1 for f in (Path(repository) / "objects" / "pack").iterdir() if f.suffix == ".pack")


def _counted(ws: Workspace, events: list, queued: bool) -> dict[str, float]:
    objects, packs = loose_objects(ws.repository), pack_files(ws.repository)
    anchors = len(anchor_history(ws.repository, ws.slug))
    apply = applier(ws, events, queued)
    with CaptureQueriesContext(connection) as captured:
        apply()
    n = len(events)
    objects = loose_objects(ws.repository) - objects
    packs = pack_files(ws.repository) - packs
    anchors = len(anchor_history(ws.repository, ws.slug)) - anchors
    return {
        "queries": len(captured) / n,
        "objects": objects / n,
        "packs": packs / n,
        "refs": (n + anchors) / n,
        "anchors": anchors / n,
        # a file per loose object, two per pack, a lock file per ref moved
        "files": (objects + 2 * packs + n + anchors) / n,
    }


def per_event_counts(tmp: Path, per: int, create_us: float) -> list[tuple[str, str, str]]:
    """What an event costs, one at a time (one quest's events) and in the worker's groups
    (20 quests' events, queued quest by quest), counted outside the timed runs."""
    ws = new_workspace(tmp, "counted", fsync=False)
    quest_apply(ws, quest_events("warm", 1)[0])  # the first event also opens things
    alone = _counted(ws, quest_events("counted", per), queued=False)
    queued = [e for i in range(20) for e in quest_events(f"g{i:02d}", per)]
    grouped = _counted(ws, queued, queued=True)
    where = "round trips" if connection.vendor == "postgresql" else "statements"
    rows = [
        (f"database {where} (BEGIN and COMMIT included)", "queries", "{:.1f}"),
        ("loose objects written to Git (audit anchors included)", "objects", "{:.1f}"),
        ("packs written to Git", "packs", "{:.2f}"),
        ("refs moved (the quest's, and the audit anchor's)", "refs", "{:.1f}"),
        ("audit anchors (every checkpoint decision, every 100th entry)", "anchors", "{:.2f}"),
        ("files created in Git (a loose object 1, a pack 2, a ref moved 1)", "files", "{:.1f}"),
    ]
    out = [(name, fmt.format(alone[key]), fmt.format(grouped[key])) for name, key, fmt in rows]
    out.append(
        (
            f"ms of file creation at the {create_us:.0f} µs per file probed",
            f"{alone['files'] * create_us / 1000:.2f}",
            f"{grouped['files'] * create_us / 1000:.2f}",
        )
    )
    return out


def repair_rows(tmp: Path, quests: int) -> list[Row]:
    """Repair from scratch (every projection and ledger row gone, nothing of the journal in
    memory, as after a restart) and with nothing to do, over three layouts of the same
    journals: as the worker writes queued events (a pack a group), as one event a transaction
    writes them (loose objects, packed by the engine once there are about 6,700), and after
    ``git gc``. Each row says how many loose objects and packs the repository then holds."""
    rows = []
    for layout in ("worker groups", "one event a transaction", "git gc"):
        if layout != "git gc":
            prefix = layout[0]  # ledger keys are unique across workspaces: quest ids must differ
            ws = new_workspace(tmp, f"repair-{prefix}", fsync=False)
            events = [e for i in range(quests) for e in quest_events(f"{prefix}{i:05d}", 3)]
            applier(ws, events, queued=layout == "worker groups")()
        else:
            subprocess.run(["git", "gc", "-q"], cwd=ws.repository, check=True)
        shape = f"{loose_objects(ws.repository)} loose, {pack_files(ws.repository)} packs"
        layout = f"{layout} ({shape})"
        report = None

        def scratch(ws: Workspace = ws) -> None:
            nonlocal report
            report = repair_workspace(ws)

        rounds = []
        for _ in range(ROUNDS):
            Quest.objects.filter(workspace=ws).delete()
            Operation.objects.filter(workspace=ws).delete()
            forget_journals()  # as after a restart: nothing of the journal is remembered
            rounds.append(timed(scratch))
            assert report is not None and len(report.projections_created) == quests
        wall, cpu = sorted(rounds)[ROUNDS // 2]  # the median round by the clock
        count = f"{quests} quests, {len(report.operations_created)} ledger rows"
        rows.append(Row(f"repair from scratch, {layout}", "off", count, wall, cpu, "quests",
                        REPAIR_TARGET, quests))  # fmt: skip
        spread.append(f"{layout}: " + ", ".join(f"{quests / w:,.0f}" for w, _ in rounds))
        wall, cpu = timed(lambda ws=ws: repair_workspace(ws))
        assert not repair_workspace(ws).changed
        rows.append(Row(f"repair with nothing to do, {layout}", "off", f"{quests} quests",
                        wall, cpu, "quests"))  # fmt: skip
    return rows


def probe_file_creation(tmp: Path) -> float:
    """µs to create one small file where the journals are: most of a journal write is
    creating files (a loose object each, a lock file per ref), and on a shared machine that
    cost moves a lot from one minute to the next."""
    probe = tmp / "probe"
    probe.mkdir()
    wall = time.perf_counter()
    for i in range(200):
        (probe / f"f{i}").write_bytes(b"x" * 200)
    return (time.perf_counter() - wall) / 200 * 1e6


def run(tmp: Path, args: argparse.Namespace) -> None:
    print(f"# engine benchmark on {connection.vendor} ({connection.settings_dict['NAME']})")
    print(f"database durability: {database_durability()}")
    before = probe_file_creation(tmp)
    print(f"journals in {tmp}: creating a small file takes {before:.0f} µs")
    rows = [apply_run(tmp, "apply", args.quests, args.per_quest, False, args.profile)]
    rows.append(apply_run(tmp, "queued", args.quests, args.per_quest, False, False, True))
    if args.fsync_quests:
        rows.append(apply_run(tmp, "fsync", args.fsync_quests, args.per_quest, True, False))
        rows.append(apply_run(tmp, "fsync-q", args.fsync_quests, args.per_quest, True, False, True))
    after = probe_file_creation(tmp / "apply.git")
    print(f"file creation after the apply runs: {after:.0f} µs")
    counts = per_event_counts(tmp, args.per_quest, (before + after) / 2)
    rows += repair_rows(tmp, args.repair_quests)
    print()
    print("| measure | journal fsync | count | seconds | CPU seconds | rate | rate by CPU time "
          "| ratio to target |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row.cells) + " |")
    print()
    print("| per accepted event | one at a time | worker groups |")
    print("|---|---:|---:|")
    for name, alone, grouped in counts:
        print(f"| {name} | {alone} | {grouped} |")
    print()
    print(f"targets: engine apply >= {APPLY_TARGET} events/s on PostgreSQL (one writer: the "
          f"worker); repair >= {REPAIR_TARGET:,} quests/s (ratio: the clock's rate over the "
          "target)")  # fmt: skip
    print(f"repair from scratch: the median of {ROUNDS} rounds (each from an empty database and "
          "no journal in memory); the rounds, quests/s by the clock:")  # fmt: skip
    for line in spread:
        print(f"- {line}")
    print("journal fsync: off is libgit2's default; on is core.fsyncObjectFiles=true (each loose")
    print("object, ref and their directories fsynced). The database's fsync is its own setting,")
    print("shown above. The CPU rate counts this process only, not the database server's.")
    print(f"libgit2 {pygit2.LIBGIT2_VERSION}, pygit2 {pygit2.__version__}")


if __name__ == "__main__":
    main()
