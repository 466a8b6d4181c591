"""Benchmark: OTLP log exports over real HTTP into the database, protobuf and JSON.

``.venv/bin/python benchmarks/ingest_http.py [--records N] [--batch B]``. The records are
``benchmarks/ingest.py``'s (N error logs, default 100,000, with real Python tracebacks and
Java, Node and Go traces, a secret in one of ten), in exports of B records (default 1,000),
encoded once as protobuf and once as OTLP JSON before any timing. Each export is POSTed, one
at a time with a new connection, as an exporter does, to a threaded WSGI server on 127.0.0.1
(what ``manage.py runserver`` serves: Django's ``ThreadedWSGIServer``) running the whole
receiver: token check, rate limit (on, at its default), read, parse, redact, fingerprint, and
the transaction that stores each error as an ``IngestedSignal`` and queues its quest event. The
record budget is off: one token sending as fast as it can would be throttled by it.

The database is the one in DATABASE_URL (a throwaway ``test_…_ingest_http_<pid>`` database
beside it) or the embedded SQLite default in a temporary data directory; the doorbell is off
(no worker listens). Printed per format: records/s over the wall time of all requests, the
p50 and p95 request time, and the ratio to ``parse_logs`` alone on the same bodies (in this
process, no HTTP, no database): what HTTP and storage cost on top of the pure part.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
# The SQLite file and the cache's files live here, away from anyone else's.
_DATA = tempfile.TemporaryDirectory(prefix="ephyra-ingest-http-bench-")
os.environ.setdefault("EPHYRA_DATA_DIR", _DATA.name)
os.environ["EPHYRA_DOORBELL"] = "false"
os.environ.setdefault("EPHYRA_OTLP_RECORD_LIMIT", "0")

import django  # noqa: E402

django.setup()

from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.db import connection  # noqa: E402

from benchmarks.ingest import build_records, encode_json, encode_protobuf  # noqa: E402
from ephyra.redaction import redact as redaction  # noqa: E402
from ephyra.telemetry import JSON, PROTOBUF, parse_logs  # noqa: E402
from intake.otlp.models import IngestedSignal  # noqa: E402
from intake.otlp.tokens import token_create  # noqa: E402
from journal.store import Journal  # noqa: E402
from ledger.models import InboundEvent  # noqa: E402
from quests.models import Workspace  # noqa: E402

FORMATS = (("protobuf", PROTOBUF, encode_protobuf), ("json", JSON, encode_json))


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # the standard library names it so
        pass  # one line per request would time the terminal


def serve() -> tuple[ThreadedWSGIServer, str]:
    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler, allow_reuse_address=False)
    server.set_app(get_wsgi_application())
    threading.Thread(target=server.serve_forever, name="ingest-http-bench", daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}"


def post(url: str, body: bytes, content_type: str, token: str) -> float:
    """Send one export; its round-trip time in seconds. Anything but a full success stops."""
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": content_type, "Authorization": f"Bearer {token}"},
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=300) as response:
        answer = response.read()
        took = time.perf_counter() - start
        if response.status != 200 or answer not in (b"", b"{}"):
            raise SystemExit(f"export not fully taken: HTTP {response.status} {answer[:200]!r}")
    return took


def forget_lines() -> None:
    """Empty redaction's memory of lines seen (as benchmarks/ingest.py does before each run),
    so that neither pass, nor the second format, reads lines the one before remembered."""
    redaction.set_line_cache_size(redaction.set_line_cache_size(0))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def run(records: int, batch: int) -> str:
    data = build_records(records)
    chunks = [data[i : i + batch] for i in range(0, len(data), batch)]
    bodies = {name: [encode(c) for c in chunks] for name, _, encode in FORMATS}
    # A server's heap does not hold the benchmark's 100,000 records: drop them, and take what
    # is left out of the collector's sight, so neither side pays for scanning the fixtures.
    del data, chunks
    gc.collect()
    gc.freeze()
    tmp = Path(_DATA.name)
    Journal.init(tmp / "journal.git", bare=True)
    workspace = Workspace.objects.create(
        slug="bench", name="bench", repository=str(tmp / "journal.git")
    )
    _, token = token_create(workspace, name="bench")
    server, base = serve()
    rows = []
    try:
        for name, content_type, _ in FORMATS:
            forget_lines()
            start = time.perf_counter()
            for body in bodies[name]:
                parse_logs(body, content_type)
            pure = time.perf_counter() - start
            # Each format starts from the same tables: the second must not pay for the first's
            # 100,000 rows (its exports ran a third slower into tables that size).
            IngestedSignal.objects.all().delete()
            InboundEvent.objects.all().delete()
            forget_lines()
            start = time.perf_counter()
            times = [post(f"{base}/v1/logs", body, content_type, token) for body in bodies[name]]
            wall = time.perf_counter() - start
            stored = IngestedSignal.objects.count()
            if stored != records:
                raise SystemExit(f"{name}: {stored} signals stored for {records} records")
            queued = InboundEvent.objects.count()
            rows.append((name, len(times), wall, times, pure, sum(map(len, bodies[name])), queued))
    finally:
        server.shutdown()
        server.server_close()
        gc.unfreeze()
    return table(rows, records, batch)


def table(rows, records: int, batch: int) -> str:
    vendor = connection.vendor
    lines = [
        f"# ingest over HTTP: {records} error log records in exports of {batch}, one request "
        f"at a time, into {vendor}, each format into the same empty tables",
        f"# Python {platform.python_version()} on {platform.machine()}, server and client in "
        "one process (the client only waits)",
        "",
        "| format | requests | MB sent | records/s | p50 request ms | p95 request ms "
        "| parse alone records/s | HTTP path ÷ parse alone | quest events queued |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, requests, wall, times, pure, size, queued in rows:
        rate, pure_rate = records / wall, records / pure
        lines.append(
            f"| {name} | {requests} | {size / 1e6:.1f} | {rate:,.0f} "
            f"| {percentile(times, 50) * 1e3:.1f} | {percentile(times, 95) * 1e3:.1f} "
            f"| {pure_rate:,.0f} | {rate / pure_rate:.2f}x | {queued:,} |"
        )
    lines.append("")
    lines.append(
        "ratio: the HTTP path's records/s over parse_logs' alone (wall time, this process); "
        "below 1 is what HTTP, the token, the rate limit and the database add"
    )
    lines.append(f"- every record was stored as a signal ({len(rows)} formats x {records}).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    args = parser.parse_args(argv)
    if connection.vendor != "sqlite":  # never the test database a test run may be using
        test = connection.settings_dict.setdefault("TEST", {})
        test["NAME"] = f"test_{connection.settings_dict['NAME']}_ingest_http_{os.getpid()}"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        report = run(args.records, args.batch)
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
