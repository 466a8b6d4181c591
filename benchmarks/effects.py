"""Effects delivered per second: the ledger with its worker process, against plain Celery tasks.

What a user would otherwise pick is a Celery task per effect. So in one run, on the same
database and broker, this delivers N no-op effects through the ledger (each claimed under the
lease's fence, called, recorded and fed back by one ``manage.py worker`` process), and sends N
plain Celery no-op tasks (``bench.noop``, benchmarks/noop_tasks.py) through one ``celery
worker`` process with the same settings: late acks, prefetch 1, solo pool. Each is timed from
the start of enqueueing to the moment all N are done, with the worker already running, so both
times include the producer.

The operations are pending ``Operation`` rows of a no-op effect type (``notify_inbox``, routed
to ``tests.ledger.world.NoopAdapter``) bound to the journal heads of 100 real quests the engine
created first. Why not N quests through the engine: that would time the engine's journal
writes (benchmarks/engine.py measures those), not delivery; bound to real heads, each
operation still takes the worker's full path, including the check that its quest still asks
for it. Rows go in 500 to a transaction, as the engine's bulk insert does, ringing the
doorbell after each.

Runs on PostgreSQL and Redis when DATABASE_URL and REDIS_URL are set, else on the embedded
default (SQLite and the filesystem broker under a temporary data directory), and says which.
Run: .venv/bin/python benchmarks/effects.py [--effects 10000]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
# The embedded broker's folders and the SQLite file live here, away from anyone else's queue.
_DATA = tempfile.TemporaryDirectory(prefix="ephyra-effects-bench-")
os.environ.setdefault("EPHYRA_DATA_DIR", _DATA.name)

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from ephyra.celery import app  # noqa: E402
from journal.store import Journal  # noqa: E402
from ledger.inbound import ring  # noqa: E402
from ledger.models import Lease, Operation  # noqa: E402
from quests.engine import quest_apply  # noqa: E402
from quests.models import Quest, Workspace  # noqa: E402
from tests.core.story import Story  # noqa: E402
from tests.ledger.harness import WorkerProcess, worker_env  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

QUESTS = 100
CHUNK = 500
NOOP_TYPE = "notify_inbox"
TARGET = 0.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--effects", type=int, default=10_000)
    args = parser.parse_args(argv)
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        report = run(Path(_DATA.name), args.effects)
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)
    print(report)
    return 0


def environment(**extra: str) -> dict[str, str]:
    env = worker_env(EPHYRA_DATA_DIR=str(settings.DATA_DIR), **extra)
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    return env


def run(tmp: Path, effects: int) -> str:
    redis = bool(settings.REDIS_URL)
    where = f"{connection.vendor} + {'Redis' if redis else 'filesystem broker'}" + (
        "" if redis and connection.vendor == "postgresql" else " (the embedded default)"
    )
    print(f"# effects benchmark on {where}: {effects} no-op effects each way")
    ws = workspace(tmp)
    ours = time_ledger(ws, tmp, effects)
    plain = time_celery(tmp, effects)
    ratio = ours / plain
    rows = [
        ("ours: ledger + `manage.py worker`", ours),
        ("plain Celery `bench.noop` (acks late, prefetch 1, solo)", plain),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [
        "",
        f"| {'delivery'.ljust(width)} | effects | seconds | effects/s |",
        f"|{'-' * (width + 2)}|--------:|--------:|----------:|",
        *(
            f"| {name.ljust(width)} | {effects:7d} | {effects / rate:7.2f} | {rate:9.0f} |"
            for name, rate in rows
        ),
        "",
        f"ratio ours / plain Celery: {ratio:.2f}x "
        f"(target: ours >= {TARGET}x plain Celery: {'met' if ratio >= TARGET else 'NOT met'})",
    ]
    return "\n".join(lines)


def workspace(tmp: Path) -> Workspace:
    Journal.init(tmp / "bench.git", bare=True)
    ws = Workspace.objects.create(slug="bench", name="bench", repository=str(tmp / "bench.git"))
    for i in range(QUESTS):
        quest_apply(ws, Story(f"b{i:03d}").signal(fingerprint=f"fp{i}"))
    return ws


def time_ledger(ws: Workspace, tmp: Path, effects: int) -> float:
    env = environment(
        # Triage is switched off: only the benchmark's no-op operations are delivered.
        EPHYRA_EFFECT_ADAPTERS=f"run_triage=,{NOOP_TYPE}=tests.ledger.world.NoopAdapter",
    )
    worker = WorkerProcess(["manage.py", "worker", "--loglevel", "WARNING"], env, tmp / "ours")
    try:
        held = Lease.objects.filter(workspace=ws).exclude(owner="")
        assert wait_until(held.exists, 120), worker.tail()
        heads = list(Quest.objects.filter(workspace=ws).values_list("quest_id", "journal_head"))
        started = time.perf_counter()
        for start in range(0, effects, CHUNK):
            with transaction.atomic():
                Operation.objects.bulk_create(
                    Operation(
                        key=f"{heads[i % QUESTS][0]}:1:{NOOP_TYPE}:bench{i}:0",
                        workspace=ws,
                        quest_id=heads[i % QUESTS][0],
                        type=NOOP_TYPE,
                        journal_commit=heads[i % QUESTS][1],
                    )
                    for i in range(start, min(start + CHUNK, effects))
                )
            ring(ws.pk)
        done = Operation.objects.filter(workspace=ws, type=NOOP_TYPE, state="succeeded")
        assert wait_until(lambda: done.count() == effects, 3600, interval=0.02), worker.tail()
        took = time.perf_counter() - started
    finally:
        worker.stop(signal.SIGTERM)
    return effects / took


def queued(queue: str) -> int:
    """Messages still in the broker for ``queue``: taken ones are gone (Redis: popped from the
    list into the unacked set; files: moved out of the folder)."""
    if settings.REDIS_URL:
        with app.connection_for_write() as conn:
            return conn.default_channel.client.llen(queue)
    folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
    return sum(1 for name in os.listdir(folder) if name.endswith(f".{queue}.msg"))


def time_celery(tmp: Path, effects: int) -> float:
    queue = f"bench-noop-{uuid.uuid4().hex[:8]}"
    # The Ephyra loop Celery starts beside its consumer stays idle: nothing is pending for it.
    env = environment(EPHYRA_POLL_MS="600000", EPHYRA_EFFECT_ADAPTERS="run_triage=")
    command = [
        "-m", "celery", "-A", "benchmarks.noop_tasks", "worker", "--pool=solo", "--concurrency=1",
        f"--queues={queue}", "--loglevel=WARNING",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    worker = WorkerProcess(command, env, tmp / "celery")
    try:
        app.send_task("bench.noop", queue=queue)  # a first task: the worker is consuming
        assert wait_until(lambda: queued(queue) == 0, 120), worker.tail()
        time.sleep(0.5)  # ... and has finished it
        started = time.perf_counter()
        for _ in range(effects):
            app.send_task("bench.noop", queue=queue)
        # With prefetch 1 and late acks at most one message is past the queue and unfinished;
        # a no-op finishes within a millisecond of being taken.
        assert wait_until(lambda: queued(queue) == 0, 3600, interval=0.02), worker.tail()
        took = time.perf_counter() - started
    finally:
        worker.stop(signal.SIGTERM)
    return effects / took


if __name__ == "__main__":
    sys.exit(main())
