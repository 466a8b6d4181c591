"""The demo's web service, written from nothing: a small shop that prices orders, with a pytest
suite and a Git history of a dozen commits, one of which breaks it.

The seventh commit, "Apply the bulk discount per unit", divides by the quantity: an order line
whose quantity is 0 (a line a customer emptied) now raises ``ZeroDivisionError`` in
``shop/prices.py``. The suite has had a test for emptied lines since the first commit, so the
reproduction and bisect find it; nobody ran the suite before deploying. The same commit also
adds ``UNIT_NAMES``. In the rollback scenario a later commit prints receipts with them (and
has no test), so reverting the culprit breaks receipts in production, in the patched file.

The service runs on the standard library's WSGI server and sends its logs through the real
OpenTelemetry SDK (OTLP/HTTP) to wherever ``OTEL_EXPORTER_OTLP_ENDPOINT`` points.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

SCENARIOS = ("main", "rollback")
START = 1_767_225_600  # 2026-01-01T00:00:00Z: the history's first commit
PEOPLE = ("Ada Lovelace <ada@shop.example>", "Grace Hopper <grace@shop.example>")
CULPRIT_AUTHOR = "Rita Regress <rita@shop.example>"
CULPRIT_SUBJECT = "Apply the bulk discount per unit"
REPRODUCING_TEST = "tests/test_prices.py::test_an_emptied_line_costs_nothing"

CATALOGUE = {"apple": 120, "pear": 90}
PRICES_HEAD = '''"""Prices of the shop, in cents."""

CATALOGUE = {catalogue}


def unit_price(sku):
    """The price of one unit of ``sku``."""
    return CATALOGUE[sku]
'''
GOOD_LINE = '''

def line_total(sku, quantity):
    """What ``quantity`` units of ``sku`` cost."""
    return unit_price(sku) * quantity
'''
BAD_LINE = '''

BULK = 10  # units from which each unit costs 5% less

UNIT_NAMES = {"apple": "apples", "pear": "pears", "plum": "plums"}


def line_total(sku, quantity):
    """What ``quantity`` units of ``sku`` cost, the bulk discount taken off each unit."""
    gross = unit_price(sku) * quantity
    discount = gross * 5 // 100 if quantity >= BULK else 0
    per_unit = (gross - discount) // quantity
    return per_unit * quantity
'''
ORDER_TOTAL = '''

def order_total(lines):
    """What an order costs: ``lines`` maps each sku to its quantity."""
    return sum(line_total(sku, quantity) for sku, quantity in lines.items())
'''
RECEIPT = '''

def receipt(lines):
    """One line per sku, in words, for the printed receipt."""
    return [
        f"{quantity} {UNIT_NAMES[sku]}: {line_total(sku, quantity)} cents"
        for sku, quantity in lines.items()
    ]
'''
APP = '''"""The shop's HTTP interface (WSGI)."""

import json
import logging
from urllib.parse import parse_qsl

from shop import prices

log = logging.getLogger("shop.app")


def order(environ):
    return {{sku: int(n) for sku, n in parse_qsl(environ.get("QUERY_STRING", ""))}}


def total(environ):
    return {{"total": prices.order_total(order(environ))}}
{routes}

ROUTES = {{"/total": total{more}}}


def application(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    try:
        if path == "/health":
            status, body = "200 OK", {{"ok": True}}
        elif path in ROUTES:
            status, body = "200 OK", ROUTES[path](environ)
        else:
            status, body = "404 Not Found", {{"error": "no such page"}}
    except Exception:
        log.exception("%s failed", path)
        status, body = "500 Internal Server Error", {{"error": "internal error"}}
    log.info("%s %s", path, status[:3])
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json")])
    return [data]
'''
RECEIPT_ROUTE = '''

def receipt(environ):
    return {"receipt": prices.receipt(order(environ))}
'''
SERVE = '''"""Serve the shop: ``python -m shop.serve PORT``; logs go to OpenTelemetry."""

import logging
import os
import sys
from wsgiref.simple_server import WSGIRequestHandler, make_server

from shop.app import application


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):  # the application logs each request itself
        pass


def telemetry():
    """The OpenTelemetry SDK's logs, exported over OTLP/HTTP as its variables say."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create(
        {
            "service.name": "shop",
            "service.version": os.environ.get("SHOP_VERSION", "unknown"),
            "deployment.environment.name": "production",
        }
    )
    provider = LoggerProvider(resource=resource)
    provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(), schedule_delay_millis=500)
    )
    logging.getLogger().addHandler(LoggingHandler(logger_provider=provider))
    logging.getLogger().setLevel(logging.INFO)
    return provider


def main():
    provider = telemetry()
    server = make_server("127.0.0.1", int(sys.argv[1]), application, handler_class=Quiet)
    print("serving", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        provider.shutdown()  # what is still batched is sent


if __name__ == "__main__":
    main()
'''
TEST_PRICES = '''from shop.prices import line_total, order_total


def test_an_emptied_line_costs_nothing():
    assert order_total({"apple": 2, "pear": 0}) == 240


def test_quantities_multiply_the_unit_price():
    assert line_total("pear", 3) == 270
'''
TEST_APP = '''from shop.app import application


def call(path, query=""):
    said = []
    body = application(
        {"PATH_INFO": path, "QUERY_STRING": query}, lambda status, headers: said.append(status)
    )
    return said[0], b"".join(body)


def test_the_total_of_an_order_is_served():
    assert call("/total", "apple=1&pear=2") == ("200 OK", b\'{"total": 300}\')


def test_an_unknown_page_is_not_found():
    assert call("/nope")[0] == "404 Not Found"
'''
PYPROJECT = """[project]
name = "shop"
version = "{version}"

[tool.pytest.ini_options]
addopts = "-p no:cacheprovider"
testpaths = ["tests"]
"""


@dataclass(frozen=True)
class Service:
    """The generated repository and what its history holds."""

    source: Path  # the developers' clone (main checked out)
    remote: Path  # the bare repository everyone pushes to: the workspace's remote
    commits: tuple[str, ...]  # main, oldest first
    culprit: str
    scenario: str

    @property
    def head(self) -> str:
        return self.commits[-1]


def service_create(where: Path, scenario: str = "main") -> Service:
    """Write the shop's history in ``where/source`` and push it to ``where/remote.git``."""
    if scenario not in SCENARIOS:
        raise ValueError(f"no scenario {scenario!r}; the scenarios: {', '.join(SCENARIOS)}")
    source, remote = where / "source", where / "remote.git"
    source.mkdir(parents=True)
    _git(source, "init", "--quiet", "--initial-branch=main")
    catalogue = dict(CATALOGUE)
    state = {"line": GOOD_LINE, "more": ""}

    def prices() -> str:
        head = PRICES_HEAD.format(catalogue=repr(catalogue))
        return head + state["line"] + ORDER_TOTAL + state["more"]

    def app(receipts: bool = False) -> str:
        if receipts:
            return APP.format(routes=RECEIPT_ROUTE, more=', "/receipt": receipt')
        return APP.format(routes="", more="")

    steps: list[tuple[str, dict[str, str]]] = []
    steps.append(
        (
            "Start the shop: order totals over HTTP",
            {
                ".gitignore": "__pycache__/\n",
                "pyproject.toml": PYPROJECT.format(version="1.0"),
                "README.md": "# shop\n\nPrices orders. `python -m shop.serve 8080`\n",
                "shop/__init__.py": "",
                "shop/prices.py": prices(),
                "shop/app.py": app(),
                "shop/serve.py": SERVE,
                "tests/__init__.py": "",
                "tests/test_prices.py": TEST_PRICES,
            },
        )
    )
    steps.append(("Test the HTTP interface", {"tests/test_app.py": TEST_APP}))
    catalogue["fig"] = 250
    steps.append(("Sell figs", {"shop/prices.py": prices()}))
    steps.append(("Describe the endpoints", {"docs/http.md": "GET /total?sku=n&...\n"}))
    steps.append(("Release 1.1", {"pyproject.toml": PYPROJECT.format(version="1.1")}))
    steps.append(("Note how prices are kept", {"docs/prices.md": "Prices are in cents.\n"}))
    state["line"] = BAD_LINE
    steps.append((CULPRIT_SUBJECT, {"shop/prices.py": prices()}))
    culprit_index = len(steps) - 1
    catalogue["plum"] = 80
    steps.append(("Sell plums", {"shop/prices.py": prices()}))
    steps.append(("Say who runs the shop", {"README.md": "# shop\n\nRun by the demo team.\n"}))
    if scenario == "rollback":
        state["more"] = RECEIPT
        receipts = {"shop/prices.py": prices(), "shop/app.py": app(receipts=True)}
        steps.append(("Print receipts with the names of the units", receipts))
    else:
        steps.append(("Describe receipts to come", {"docs/receipts.md": "Soon.\n"}))
    steps.append(("Release 1.2", {"pyproject.toml": PYPROJECT.format(version="1.2")}))
    steps.append(("Keep the changelog", {"CHANGES.md": "1.2: bulk discount, plums\n"}))

    commits = []
    for n, (subject, files) in enumerate(steps):
        for name, text in files.items():
            path = source / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        author = CULPRIT_AUTHOR if n == culprit_index else PEOPLE[n % len(PEOPLE)]
        when = f"{START + n * 86_400} +0000"
        _git(source, "add", "--all")
        _git(
            source,
            "commit",
            "--quiet",
            f"--author={author}",
            "-m",
            subject,
            env={"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when},
        )
        commits.append(_git(source, "rev-parse", "HEAD"))
    _git(where, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    _git(source, "push", "--quiet", str(remote), "main")
    return Service(
        source=source,
        remote=remote,
        commits=tuple(commits),
        culprit=commits[culprit_index],
        scenario=scenario,
    )


def _git(where: Path, *args: str, env: dict[str, str] | None = None) -> str:
    import os

    done = subprocess.run(
        ["git", "-C", str(where), "-c", "user.name=Shop", "-c", "user.email=shop@example.com",
         "-c", "commit.gpgsign=false", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()
