"""The fault soak: many seeded runs of worker processes that SIGKILL themselves, and the counts.

Each run is tests/ledger/harness.py's ``run_once``: a fresh workspace with a few quests from
fatal signals, served by one worker process at a time that kills itself at a seeded choice of
the four kill points, and a person who approves the checkpoints. After each run the invariants
are checked (no key executed twice, no blind write retry, no journaled effect without a final
ledger row, projections equal to the fold of the journals, nothing left pending). The table
counts runs, kills by point, and every violation; the exit status is 1 if there was any.

Runs against the database in DATABASE_URL (PostgreSQL) or the embedded SQLite default, in one
throwaway test database for all runs (each run has its own workspace), created the way
Django's test runner does. ``make soak`` runs a thousand; ``make bench`` twenty.
Run: .venv/bin/python benchmarks/faults.py [--runs 1000 --quests 2 --one-in 12 --parallel 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from tests.ledger.harness import RunConfig, RunResult, run_once, table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--quests", type=int, default=2, help="quests per run")
    parser.add_argument("--one-in", type=int, default=12, help="kill at 1 in N points reached")
    parser.add_argument("--seed", type=int, default=1, help="the first run's seed")
    parser.add_argument(
        "--parallel", type=int, default=3, help="runs at once, each in its own workspace"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before stuck")
    args = parser.parse_args(argv)

    # autoclobber: a test database an interrupted soak left behind is dropped, not asked about.
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        with tempfile.TemporaryDirectory(prefix="ephyra-faults-") as tmp:
            results = soak(Path(tmp), args)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    return 1 if any(result.problems for result in results) else 0


def soak(tmp: Path, args: argparse.Namespace) -> list[RunResult]:
    print(
        f"# fault soak on {connection.vendor}: {args.runs} runs of {args.quests} quests, "
        f"kill at 1 in {args.one_in} points reached, {args.parallel} at a time, "
        f"seeds {args.seed}..{args.seed + args.runs - 1}"
    )
    results: list[RunResult] = []
    lock = threading.Lock()
    started = time.monotonic()

    def one(seed: int) -> RunResult:
        folder = tmp / f"run{seed}"
        folder.mkdir()
        config = RunConfig(seed=seed, quests=args.quests, one_in=args.one_in, timeout=args.timeout)
        try:
            result = run_once(config, folder)
        finally:
            connection.close()  # this thread's connection, before the test database goes
        with lock:
            results.append(result)
            if len(results) % 50 == 0 or result.problems:
                took = time.monotonic() - started
                sys.stderr.write(f"  {len(results)}/{args.runs} runs, {took:.0f}s\n")
            if result.problems:
                sys.stderr.write(f"  seed {seed}: {result.problems}\n{result.dump}\n")
        if not result.problems:  # keep the records of a failing run for reading
            shutil.rmtree(folder)
        return result

    seeds = range(args.seed, args.seed + args.runs)
    pool = ThreadPoolExecutor(max_workers=args.parallel)
    try:
        list(pool.map(one, seeds))
    except KeyboardInterrupt:
        sys.stderr.write("  interrupted: finishing the runs in progress\n")
    finally:
        pool.shutdown(cancel_futures=True)
    took = time.monotonic() - started
    seconds = [result.seconds for result in results]
    print()
    print(table(sorted(results, key=lambda r: r.seed)))
    print()
    print(
        f"{len(results)} runs in {took:.0f}s: {len(results) / took * 60:.1f} runs/min; "
        f"a run took {statistics.median(seconds):.1f}s median, {max(seconds):.1f}s at most"
    )
    failing = sorted(result.seed for result in results if result.problems)
    print(
        f"runs with a violated invariant: {len(failing)}" + (f": seeds {failing}" * bool(failing))
    )
    return results


if __name__ == "__main__":
    sys.exit(main())
