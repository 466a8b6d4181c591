"""`make run` on the embedded default: the web server and a real worker, as a newcomer gets them.

Runs scripts/run.sh (what `make run` calls) in a fresh data directory with no DATABASE_URL and
no REDIS_URL, queues a signal from another process, and waits for the worker to triage it. Then,
as docs/otlp.md tells a newcomer: an ingest token from `manage.py ingest_tokens`, an application
process whose OpenTelemetry SDK is pointed at the server by OTEL_EXPORTER_OTLP_ENDPOINT and
OTEL_EXPORTER_OTLP_HEADERS logs an exception, and the quest it opens is triaged and listed in
the admin.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# An application, configured only through the environment, as OpenTelemetry documents it.
APP = """
import logging
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

provider = LoggerProvider()  # service.name from OTEL_SERVICE_NAME
provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
logging.getLogger().addHandler(LoggingHandler(logger_provider=provider))

def total(cart):
    return sum(item["price"] for item in cart)

try:
    total([{"sku": "A-1"}])
except KeyError:
    logging.getLogger("shop.cart").exception("checkout failed")
provider.shutdown()  # flushes the batch: the export is sent before the process ends
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_make_run_serves_pages_and_its_worker_processes_effects(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    port = free_port()
    env |= {
        "EPHYRA_DATA_DIR": str(tmp_path / "data"),
        "EPHYRA_ADDR": f"127.0.0.1:{port}",
        "EPHYRA_POLL_MS": "100",
        "DEBUG": "true",
        "BIN": str(Path(sys.executable).parent),
        "DJANGO_SETTINGS_MODULE": "ephyra.settings",
    }
    env.pop("EPHYRA_DOORBELL", None)  # the real default: the doorbell rings
    repo = tmp_path / "shop"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "init",
        ],
        check=True,
    )
    run = subprocess.Popen(
        ["sh", "scripts/run.sh"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert run.poll() is None, run.stdout.read()
                assert time.monotonic() < deadline, "the web server did not come up"
                time.sleep(0.2)

        manage = [sys.executable, "manage.py"]
        subprocess.run(
            [*manage, "workspace", "add", "shop", str(repo)],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        events = tmp_path / "events.jsonl"
        signal_event = {
            "type": "signal_sensed",
            "id": "e1",
            "quest": "q1",
            "at": "2026-12-03T10:00:00Z",
            "signal": {"id": "s1", "fingerprint": "fp1", "severity": "error", "title": "boom"},
        }
        events.write_text(json.dumps(signal_event) + "\n")
        queued = subprocess.run(
            [*manage, "apply_events", "shop", str(events), "--submit"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        # The worker beside the web server answers before the command returns.
        assert '"outcome": "accepted"' in queued.stdout

        database = tmp_path / "data" / "ephyra.sqlite3"
        state = None
        while time.monotonic() < deadline and state != "triaged":
            with sqlite3.connect(database) as db:
                row = db.execute("SELECT state FROM quests_quest WHERE quest_id='q1'").fetchone()
            state = row and row[0]
            time.sleep(0.2)
        assert state == "triaged"  # the worker applied the signal, ran triage, fed it back
        with sqlite3.connect(database) as db:
            ops = db.execute("SELECT type, state FROM ledger_operation ORDER BY id").fetchall()
        assert ops[0] == ("run_triage", "succeeded")

        quest = otlp_export_becomes_a_quest(manage, env, port, database)
        assert admin_lists(manage, env, port, quest) == "triaged"
    finally:
        os.killpg(run.pid, signal.SIGTERM)
        out, _ = run.communicate(timeout=30)
    assert "worker pid" in out


def otlp_export_becomes_a_quest(manage, env, port, database) -> str:
    """docs/otlp.md, "Try it with make run": a token, an SDK export, the quest it opened."""
    made = subprocess.run(
        [*manage, "ingest_tokens", "add", "shop", "--name", "shop-api"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    token = made.stdout.splitlines()[1]
    app_env = env | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer {token}",
        "OTEL_SERVICE_NAME": "shop-api",
    }
    app = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", APP],
        env=app_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert app.returncode == 0, app.stderr
    assert "Failed to export" not in app.stderr, app.stderr
    with sqlite3.connect(database) as db:
        quest, service, exception = db.execute(
            "SELECT quest_id, service, exception_type FROM intake_ingestedsignal"
        ).fetchone()
    assert (service, exception) == ("shop-api", "KeyError")
    deadline, state = time.monotonic() + 60, None
    while time.monotonic() < deadline and state != "triaged":
        with sqlite3.connect(database) as db:
            row = db.execute("SELECT state FROM quests_quest WHERE quest_id=?", (quest,)).fetchone()
        state = row and row[0]
        time.sleep(0.2)
    assert state == "triaged"  # the worker opened the quest from the export and triaged it
    return quest


def admin_lists(manage, env, port, quest: str) -> str:
    """Sign in to the admin as a newcomer would and read the quest's state from its list."""
    subprocess.run(
        [*manage, "createsuperuser", "--noinput", "--username", "ann", "--email", "a@example.com"],
        cwd=ROOT,
        env=env | {"DJANGO_SUPERUSER_PASSWORD": "a-long-local-password"},
        check=True,
        capture_output=True,
    )
    base = f"http://127.0.0.1:{port}"
    browser = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )
    page = f"/admin/quests/quest/?q={quest}"
    with browser.open(f"{base}/admin/login/?next={urllib.parse.quote(page)}", timeout=10) as r:
        form = r.read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    fields = {
        "csrfmiddlewaretoken": csrf,
        "username": "ann",
        "password": "a-long-local-password",
        "next": page,
    }
    login = urllib.request.Request(
        f"{base}/admin/login/?next={urllib.parse.quote(page)}",
        data=urllib.parse.urlencode(fields).encode(),
        headers={"Referer": f"{base}/admin/login/"},
    )
    with browser.open(login, timeout=10) as r:
        listing = r.read().decode()
        assert r.url.endswith(page), r.url  # signed in and sent on to the quest list
    rows = [r for r in re.findall(r"<tr[^>]*>.*?</tr>", listing, re.S) if "field-quest_id" in r]
    assert len(rows) == 1 and quest in rows[0], listing
    return re.search(r'<td class="field-state">([^<]+)</td>', rows[0]).group(1)
