"""The demo's "production": the shop checked out from its remote at one commit, served as a
subprocess whose OpenTelemetry SDK exports its logs to Ephyra, and customers sending it orders.

A deployment here is what a small team's script does: fetch, check out the commit, restart the
process. The process runs with the same Python as the demo (it has the OpenTelemetry SDK).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

# What customers ask for: orders with an emptied line (the regression raises on them) and,
# between them, receipts (the feature the rollback scenario breaks with the revert).
ORDERS = (
    "/total?apple=2&pear=1",
    "/total?apple=2&pear=0",
    "/receipt?apple=1&plum=3",
    "/total?fig=1&plum=12",
    "/receipt?pear=2",
    "/health",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Production:
    """The shop in production: ``deploy(commit)`` (re)starts it at ``commit``."""

    remote: Path
    checkout: Path
    endpoint: str  # Ephyra's base URL: the SDK appends /v1/logs
    token: str
    log: Path
    port: int = field(default_factory=free_port)
    commit: str | None = None
    process: subprocess.Popen | None = None

    def deploy(self, commit: str) -> None:
        self.stop()
        if not self.checkout.exists():
            _git(None, "clone", "--quiet", str(self.remote), str(self.checkout))
        _git(self.checkout, "fetch", "--quiet", "origin")
        _git(self.checkout, "checkout", "--quiet", "--detach", commit)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", str(self.checkout)),
            "PYTHONPATH": str(self.checkout),
            "PYTHONDONTWRITEBYTECODE": "1",
            "SHOP_VERSION": commit,
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            # The token rides in the environment, never on the command line (ps shows that).
            "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer {self.token}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        }
        with self.log.open("a") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-W", "ignore::DeprecationWarning", "-m", "shop.serve",
                 str(self.port)],
                cwd=self.checkout,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.commit = commit
        deadline = time.monotonic() + 30
        while self.get("/health") is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"production did not start; its log: {self.log}")
            time.sleep(0.1)

    def get(self, path: str) -> tuple[int, dict] | None:
        """One request: its status and JSON body, or None when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as answer:
            return answer.code, json.loads(answer.read() or b"{}")
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """Stop the process as Ctrl-C would: the SDK flushes what it still holds."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class Traffic(threading.Thread):
    """Customers: the orders above, round and round, a few a second, counted by status."""

    def __init__(self, production: Production, per_second: float = 4.0):
        super().__init__(name="demo-traffic", daemon=True)
        self.production = production
        self.pause = 1 / per_second
        self.stopping = threading.Event()
        self.counts: dict[int, int] = {}
        self.lock = threading.Lock()

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            answer = self.production.get(ORDERS[n % len(ORDERS)])
            if answer is not None:
                with self.lock:
                    self.counts[answer[0]] = self.counts.get(answer[0], 0) + 1
            n += 1
            self.stopping.wait(self.pause)

    def errors(self) -> int:
        with self.lock:
            return sum(c for status, c in self.counts.items() if status >= 500)

    def total(self) -> int:
        with self.lock:
            return sum(self.counts.values())

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(timeout=10)


def _git(where: Path | None, *args: str) -> str:
    command = ["git"] if where is None else ["git", "-C", str(where)]
    done = subprocess.run(
        [*command, "-c", "advice.detachedHead=false", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()
