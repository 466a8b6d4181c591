"""Load test: OTLP/HTTP logs at a fixed rate into gunicorn on PostgreSQL and Redis, one worker.

``DATABASE_URL=postgres://… REDIS_URL=redis://… .venv/bin/python benchmarks/load.py
[--rate R] [--seconds S] [--batch B] [--web-workers W]``. Refuses to run without both URLs:
the figures are about the production layout (docs/deploy.md), not the embedded default.

A throwaway database ``<name>_load_<pid>`` beside DATABASE_URL's is migrated, with three
workspaces (bare journals in a temporary data directory) and an ingest token each. Then, as
separate processes on 127.0.0.1: ``gunicorn ephyra.wsgi`` with W sync workers (default 4) and
``manage.py worker`` (Celery on REDIS_URL plus the worker loop). The sender keeps a fixed
schedule, R records/s (default 1,000) for S seconds (default 60), in exports of B records
(default 100, the size of an SDK batch a second), each export due at its own instant and sent
from a pool of threads with a new connection, as exporters do. The records are error logs of
50 fingerprints (distinct exception types and frames), each fingerprint belonging to one of the
three workspaces. A throttled export (429) is counted, with whether it carried Retry-After, and
not sent again.

Reported, against the targets of issue 18: exports and records accepted, rejected and
throttled; p50/p95/p99 of the request time; the time from the burst's end until every
submitted event is applied (no inbound event pending, a quest per fingerprint); journal commits
and new database rows per accepted record; what /metrics says was received; the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FINGERPRINTS = 50
WORKSPACES = ("alpha", "beta", "gamma")
METRICS_TOKEN = "load-benchmark-metrics-token"


def refuse_without_services() -> tuple[str, str]:
    database, broker = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if not database.startswith(("postgres://", "postgresql://")) or not broker.startswith(
        ("redis://", "rediss://")
    ):
        raise SystemExit(
            "benchmarks/load.py needs PostgreSQL and Redis: set DATABASE_URL=postgres://… and "
            "REDIS_URL=redis://… (docs/observability.md, 'Load')"
        )
    return database, broker


DATABASE_URL, REDIS_URL = refuse_without_services() if __name__ == "__main__" else ("", "")
if __name__ == "__main__":
    _DATA = tempfile.mkdtemp(prefix="ephyra-load-")
    sys.path.insert(0, str(ROOT))
    _name = urlsplit(DATABASE_URL).path.lstrip("/") or "postgres"
    LOAD_DB = f"{_name}_load_{os.getpid()}"
    _parts = urlsplit(DATABASE_URL)
    LOAD_URL = urlunsplit(_parts._replace(path=f"/{LOAD_DB}"))
    os.environ.update(
        DJANGO_SETTINGS_MODULE="ephyra.settings",
        SECRET_KEY=os.environ.get("SECRET_KEY", "load-benchmark-key-signs-nothing-real"),
        EPHYRA_DATA_DIR=_DATA,
        EPHYRA_METRICS_TOKEN=METRICS_TOKEN,
    )


@dataclass
class Tally:
    sent: int = 0
    accepted_exports: int = 0
    accepted_records: int = 0
    rejected: dict[int, int] = field(default_factory=dict)
    throttled: int = 0
    throttled_with_retry_after: int = 0
    errors: int = 0
    times: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def record(fingerprint: int, n: int, now_ns: int) -> dict:
    """An error log whose exception type and frames make fingerprint ``fingerprint``."""
    trace = (
        "Traceback (most recent call last):\n"
        f'  File "/srv/app/shop/handlers_{fingerprint}.py", line {10 + fingerprint}, '
        f"in handle_{fingerprint}\n"
        f"    step_{fingerprint}(order)\n"
        f'  File "/srv/app/shop/steps.py", line {100 + fingerprint}, in step_{fingerprint}\n'
        "    raise error\n"
        f"LoadError{fingerprint}: order {n} failed"
    )
    attributes = {
        "exception.type": f"LoadError{fingerprint}",
        "exception.message": f"order {n} failed",
        "exception.stacktrace": trace,
    }
    return {
        "timeUnixNano": str(now_ns),
        "severityNumber": 17,
        "severityText": "ERROR",
        "body": {"stringValue": f"order {n} failed"},
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
    }


def export(workspace: int, size: int, rng: random.Random, counter: list[int]) -> bytes:
    mine = [f for f in range(FINGERPRINTS) if f % len(WORKSPACES) == workspace]
    now = time.time_ns()
    records = []
    for _ in range(size):
        counter[0] += 1
        records.append(record(rng.choice(mine), counter[0], now))
    resource = [{"key": "service.name", "value": {"stringValue": f"shop-{workspace}"}}]
    body = {
        "resourceLogs": [
            {"resource": {"attributes": resource}, "scopeLogs": [{"logRecords": records}]}
        ]
    }
    return json.dumps(body).encode()


def send(url: str, token: str, body: bytes, records: int, tally: Tally) -> None:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    start = time.perf_counter()
    status, retry_after = 0, None
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()
            status = answer.status
    except urllib.error.HTTPError as error:
        status, retry_after = error.code, error.headers.get("Retry-After")
    except OSError:
        status = -1
    took = time.perf_counter() - start
    with tally.lock:
        tally.times.append(took)
        if status == 200:
            tally.accepted_exports += 1
            tally.accepted_records += records
        elif status == 429:
            tally.throttled += 1
            tally.throttled_with_retry_after += retry_after is not None
        elif status == -1:
            tally.errors += 1
        else:
            tally.rejected[status] = tally.rejected.get(status, 0) + 1


def burst(base: str, tokens: list[str], rate: int, seconds: float, batch: int) -> Tally:
    """Exports due at fixed instants (rate / batch a second), round-robin over the tokens."""
    tally, rng, counter = Tally(), random.Random(18), [0]
    total = int(rate * seconds) // batch
    interval = batch / rate
    # Encoded before the clock starts: the sender's own work must not set the pace.
    bodies = [export(i % len(tokens), batch, rng, counter) for i in range(total)]
    with ThreadPoolExecutor(max_workers=32) as pool:
        start = time.perf_counter()
        for i, body in enumerate(bodies):
            due = start + i * interval
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            tally.sent += 1
            pool.submit(send, f"{base}/v1/logs", tokens[i % len(tokens)], body, batch, tally)
    return tally


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv: list[str], log: Path) -> subprocess.Popen:
    env = os.environ | {"DATABASE_URL": LOAD_URL, "REDIS_URL": REDIS_URL}
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_ready(base: str, web: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if web.poll() is not None:
            raise SystemExit("gunicorn exited before it was ready (see its log)")
        try:
            with urllib.request.urlopen(f"{base}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("gunicorn was not ready within a minute")


def row_counts() -> int:
    from django.apps import apps
    from django.db import connection

    total = 0
    with connection.cursor() as cursor:
        for model in apps.get_models():
            table = connection.ops.quote_name(model._meta.db_table)
            cursor.execute(f"SELECT count(*) FROM {table}")
            total += cursor.fetchone()[0]
    return total


def journal_commits(paths: list[str]) -> int:
    total = 0
    for path in paths:
        out = subprocess.run(
            ["git", "-C", path, "rev-list", "--all", "--count"],
            capture_output=True,
            text=True,
            check=False,
        )
        total += int(out.stdout.strip() or 0)
    return total


def settle(timeout: float) -> float | None:
    """Seconds until no submitted event is pending and every fingerprint has its quest."""
    from ledger.models import InboundEvent
    from quests.models import Quest

    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        pending = InboundEvent.objects.filter(state=InboundEvent.State.PENDING).exists()
        if not pending and Quest.objects.count() >= FINGERPRINTS:
            return time.perf_counter() - start
        time.sleep(0.1)
    return None


def scraped(base: str) -> tuple[float, float]:
    """What /metrics says: signals received, and exports refused (every reason)."""
    from prometheus_client.parser import text_string_to_metric_families

    request = urllib.request.Request(
        f"{base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        text = answer.read().decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    received = sum(s.value for s in samples if s.name == "ephyra_signals_received_total")
    refused = sum(s.value for s in samples if s.name == "ephyra_otlp_exports_rejected_total")
    return received, refused


def run(rate: int, seconds: float, batch: int, web_workers: int) -> tuple[str, bool]:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from intake.otlp.models import IngestedSignal
    from intake.otlp.tokens import token_create
    from journal.store import Journal
    from ledger.models import InboundEvent
    from quests.models import Workspace

    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{LOAD_DB}"')
    connection.close()
    connection.settings_dict["NAME"] = LOAD_DB
    processes: list[subprocess.Popen] = []
    try:
        call_command("migrate", verbosity=0)
        tokens, journals = [], []
        for slug in WORKSPACES:
            path = Path(_DATA) / f"{slug}.git"
            Journal.init(path, bare=True)
            journals.append(str(path))
            workspace = Workspace.objects.create(slug=slug, name=slug, repository=str(path))
            tokens.append(token_create(workspace, name="load")[1])
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        logs = Path(_DATA)
        web = start(
            [
                str(BIN / "gunicorn"),
                "ephyra.wsgi",
                f"--bind=127.0.0.1:{port}",
                f"--workers={web_workers}",
                "--timeout=60",
            ],
            logs / "web.log",
        )
        processes.append(web)
        processes.append(start([sys.executable, "manage.py", "worker"], logs / "worker.log"))
        wait_ready(base, web)
        # Each gunicorn worker's first export pays for its imports and its database connection:
        # a few exports of one record first, counted as stored but not timed.
        warm = Tally()
        for i in range(web_workers * 2):
            body = export(i % len(tokens), 1, random.Random(i), [10**9 + i])
            send(f"{base}/v1/logs", tokens[i % len(tokens)], body, 1, warm)
        if warm.accepted_records != web_workers * 2:
            raise SystemExit(f"the warm-up exports were not all accepted: {warm}")
        rows_before = row_counts()
        load_before = os.getloadavg()
        began = time.perf_counter()
        tally = burst(base, tokens, rate, seconds, batch)
        burst_seconds = time.perf_counter() - began
        load_after = os.getloadavg()
        applied = settle(timeout=max(60.0, seconds))
        stored = IngestedSignal.objects.count()
        received, refused = scraped(base)
        rows = row_counts() - rows_before
        commits = journal_commits(journals)
        events = InboundEvent.objects.count()
    finally:
        for process in reversed(processes):
            stop(process)
        connection.close()
        connection.settings_dict["NAME"] = urlsplit(DATABASE_URL).path.lstrip("/") or "postgres"
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{LOAD_DB}" WITH (FORCE)')
        connection.close()
        shutil.rmtree(_DATA, ignore_errors=True)
    per = max(tally.accepted_records, 1)
    p50, p95, p99 = (percentile(tally.times, p) for p in (50, 95, 99))
    stored -= warm.accepted_records
    received -= warm.accepted_records
    lost = tally.accepted_records - stored
    checks = {
        "nothing lost": lost == 0
        and tally.errors == 0
        and not tally.rejected
        and tally.throttled == tally.throttled_with_retry_after
        and received == stored
        and refused == tally.throttled + sum(tally.rejected.values()),
        "p99 < 1 s": p99 < 1.0,
        "every quest applied within 10 s": applied is not None and applied <= 10.0,
    }
    lines = [
        f"# load: {rate:,} records/s for {seconds:g} s in exports of {batch}, {FINGERPRINTS} "
        f"fingerprints over {len(WORKSPACES)} workspaces; gunicorn with {web_workers} sync "
        "workers and one worker (Celery + loop), PostgreSQL and Redis, all on 127.0.0.1",
        f"# Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores; "
        f"load average before {load_before[0]:.2f}, after the burst {load_after[0]:.2f}",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| exports sent | {tally.sent:,} (burst {burst_seconds:.1f} s) |",
        f"| exports accepted | {tally.accepted_exports:,} |",
        f"| records accepted | {tally.accepted_records:,} |",
        f"| records stored (signals) | {stored:,} |",
        f"| received per /metrics | {received:,.0f} |",
        f"| rejected exports | {sum(tally.rejected.values()):,} {tally.rejected or ''} |",
        f"| throttled exports (429) | {tally.throttled:,}, "
        f"{tally.throttled_with_retry_after:,} with Retry-After |",
        f"| refused per /metrics | {refused:,.0f} |",
        f"| connection errors | {tally.errors:,} |",
        f"| request p50 / p95 / p99 | {p50 * 1e3:.0f} / {p95 * 1e3:.0f} / {p99 * 1e3:.0f} ms |",
        "| every quest applied after the burst | "
        + (f"{applied:.1f} s |" if applied is not None else "not within the wait |"),
        f"| quest events submitted | {events:,} |",
        f"| journal commits per accepted record | {commits / per:.4f} ({commits:,}) |",
        f"| database rows per accepted record | {rows / per:.2f} ({rows:,}) |",
        "",
    ]
    lines += [f"- target {name}: {'met' if ok else 'MISSED'}" for name, ok in checks.items()]
    return "\n".join(lines), all(checks.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1_000, help="records per second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--batch", type=int, default=100, help="records per export")
    parser.add_argument("--web-workers", type=int, default=4)
    args = parser.parse_args(argv)
    if args.rate < 1 or args.seconds <= 0 or args.batch < 1 or args.web_workers < 1:
        parser.error("--rate, --seconds, --batch and --web-workers must be positive")
    report, met = run(args.rate, args.seconds, args.batch, args.web_workers)
    print(report)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
