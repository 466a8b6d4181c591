"""Benchmark: the reviewer dashboard's pages over 10,000 and 100,000 quests.

``.venv/bin/python benchmarks/inbox.py [--sizes 10000,100000] [--requests 31] [--warmup 5]``

Seeds four workspaces (shop 40 % of the quests, billing 30 %, search 20 %, infra 10 %) with
quest projection rows in a spread of states close to a busy installation's (a third wait for a
person: at checkpoints A, B and C, claimed, parked; most of the rest closed or abandoned), each
with a journal head, a title, a fingerprint, a severity, a route and a risk; a person's claim on
each claimed one (the person timed holds 25 at any size, as a reviewer's load does not grow with
the installation; the others are spread over one reviewer per 400 quests); the OTLP signal rows
(``IngestedSignal``, with frames) each quest took; and the first audit entries of each quest,
hash-chained per workspace. They go in by COPY (``ephyra.sql.insert_rows``), not through the
engine: what is timed is reading, not writing.
The one quest whose page is timed is real: journaled through the engine into a real Git journal,
with its patch between two real commits of the workspace's mirror, its proof, twenty signals and
a few comments, so its page reads Git and highlights the diff as in production.

Then, per size, as server time per request through Django's test client (``--requests``
requests after ``--warmup``: the median and the best by the clock, and the median's CPU time of
this process and time waiting for the database), with the number of queries of each: the inbox
(first page, default filters) as a person who reviews shop and billing and reads search; the
quest page as that person; the audit list as a staff member of those three workspaces
(``/audit/`` when the project serves it; else ``ledger.selectors.audit_page`` rendered through
a minimal template at ``/bench/audit/``, and the table says which); and, as the reference a user
would otherwise reach for, the Django admin's changelists of the same quests and audit entries
as a superuser. The first size is seeded, measured, then grown to the next one. After seeding,
``VACUUM ANALYZE`` (on SQLite ``ANALYZE``): the state autovacuum leaves a table in. On a shared
machine the clock counts the time other processes hold the CPUs: the load average is printed,
and the best request is the one they disturbed least.

The database is the one in DATABASE_URL (a throwaway ``<name>_inbox_<pid>`` database beside
it) or the embedded SQLite default in a temporary data directory.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import logging
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
_DATA = tempfile.TemporaryDirectory(prefix="ephyra-inbox-bench-")
os.environ.setdefault("EPHYRA_DATA_DIR", _DATA.name)
os.environ["EPHYRA_DOORBELL"] = "false"

import django  # noqa: E402

django.setup()
# The engine logs each transition it applies: the real quest's two dozen would only be noise.
logging.getLogger("ephyra.transitions").setLevel(logging.WARNING)

import pygit2  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.decorators import login_required  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.template import Context, Template  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext, override_settings  # noqa: E402
from django.urls import Resolver404, include, path, resolve  # noqa: E402

from ephyra.core.canonical import canonical_digest  # noqa: E402
from ephyra.core.proof import CheckResult  # noqa: E402
from ephyra.core.states import State  # noqa: E402
from ephyra.sql import insert_rows  # noqa: E402
from intake.otlp.models import IngestedSignal  # noqa: E402
from journal.store import Journal  # noqa: E402
from ledger.audit import GENESIS  # noqa: E402
from ledger.models import AuditEntry  # noqa: E402
from ledger.selectors import AuditFilters, audit_page  # noqa: E402
from quests.engine import quest_apply  # noqa: E402
from quests.models import Quest, Workspace  # noqa: E402
from quests.projection import projection_of  # noqa: E402
from quests.roles import Role, allows, role_grant, workspace_roles  # noqa: E402
from quests.selectors import WAITING_STATES  # noqa: E402
from tests.core import lifecycle_helpers as lifecycle  # noqa: E402
from tests.core.story import Story  # noqa: E402

S = State
# Each workspace's share of the quests; the person reviews shop and billing, reads search, and
# holds no role in infra (whose rows the inbox must leave out, not merely not show).
WORKSPACES = {"shop": 40, "billing": 30, "search": 20, "infra": 10}
REVIEWER_IN, STAFF_IN = ("shop", "billing"), ("search",)
# States in percent: 31 % wait for a person (hypothesised, planned, ready, handed_off, parked).
SPREAD = {
    S.SENSED: 2, S.TRIAGED: 2, S.RESEARCHING: 4, S.HYPOTHESISED: 8, S.REPRODUCING: 3,
    S.PLANNED: 6, S.PATCHING: 3, S.PROVING: 2, S.READY: 6, S.LANDING: 1, S.WATCHING: 4,
    S.CLOSED: 40, S.ROLLED_BACK: 1, S.PARKED: 5, S.HANDED_OFF: 6, S.ABANDONED: 7,
}  # fmt: skip
# rita is the person the inbox is timed for; she holds MINE claimed reviews, the rest are held
# by a pool of reviewers that grows with the installation (one per QUESTS_PER_REVIEWER quests).
REVIEWERS = ("rita", "ann", "bob", "cy", "dee")
MINE = 25
QUESTS_PER_REVIEWER = 400
SEVERITIES = {"error": 60, "warning": 20, "info": 12, "fatal": 8}
ROUTES = {"auto_fix": 70, "human": 20, "research_only": 10}
RISKS = {"low": 30, "medium": 50, "high": 20}
# The events a quest's first audit entries record, in the order a quest meets them.
AUDITED = (
    "signal_sensed",
    "triage_decided",
    "research_started",
    "hypothesis_written",
    "checkpoint_decided",
    "reproduction_recorded",
)
EXCEPTIONS = ("KeyError", "TimeoutError", "ValueError", "IntegrityError", "NullPointerException")
MESSAGES = ("'locale'", "upstream took 30s", "invalid literal for int()", "duplicate key", "null")
PLACES = ("cart.add", "checkout.pay", "search.query", "invoice.render", "auth.refresh", "feed.page")
REAL_QUEST = "q-bench-real-quest-0001"
BATCH = 5_000


def weighted(rng: random.Random, table: dict) -> object:
    return rng.choices(list(table), weights=list(table.values()))[0]


def hexid(*parts: object, size: int = 40) -> str:
    return hashlib.sha1("|".join(map(str, parts)).encode()).hexdigest()[:size]


def state_templates() -> dict[tuple, dict]:
    """A quest's JSON form in each state (and each checkpoint a claim or a pause holds), built
    by the pure machine along the canonical events; seeded rows are copies with their own
    fields."""
    checks = lifecycle.passed("tests")
    templates = {}
    for state in SPREAD:
        for at in (S.HYPOTHESISED, S.PLANNED, S.READY):
            _, quest = lifecycle.drive(state, "template", checks=checks, at=at)
            templates[state, at] = quest.to_dict()
    return templates


class Seeder:
    """Adds seeded quests, their signals and audit entries, ``count`` at a time."""

    def __init__(self, workspaces: dict[str, Workspace], now: datetime) -> None:
        self.workspaces = workspaces
        self.now = now
        self.rng = random.Random(14)
        self.templates = state_templates()
        self.seeded = 0
        self.mine = 0  # rita's claims
        self.signals = 0
        self.audit = 0

    def grow(self, count: int) -> None:
        """Add ``count`` quests, in batches, each workspace's rows of a batch in one COPY."""
        for start in range(self.seeded, self.seeded + count, BATCH):
            rows = {slug: ([], [], []) for slug in self.workspaces}
            for n in range(start, min(start + BATCH, self.seeded + count)):
                slug = weighted(self.rng, WORKSPACES)
                self.one(n, slug, *rows[slug])
            with transaction.atomic():
                for slug, (quests, signals, audit) in rows.items():
                    workspace = self.workspaces[slug]
                    insert_rows(Quest, workspace, quests)
                    insert_rows(IngestedSignal, workspace, signals)
                    insert_rows(AuditEntry, workspace, self.chained(workspace, audit))
                    self.signals += len(signals)
                    self.audit += len(audit)
        self.seeded += count

    def claimant(self, n: int, slug: str) -> str:
        if slug in REVIEWER_IN and self.mine < MINE:
            self.mine += 1
            return "rita"
        return f"reviewer-{self.rng.randrange(max(1, n // QUESTS_PER_REVIEWER))}"

    def one(self, n: int, slug: str, quests: list, signals: list, audit: list) -> None:
        rng = self.rng
        state = weighted(rng, SPREAD)
        at = rng.choice((S.HYPOTHESISED, S.PLANNED, S.READY))
        quest_id = f"q-{hexid('quest', n, size=20)}"
        updated = self.now - timedelta(seconds=rng.uniform(60, 90 * 86400))
        created = updated - timedelta(seconds=rng.uniform(0, 10 * 86400))
        severity = weighted(rng, SEVERITIES)
        exception, message = rng.choice(EXCEPTIONS), rng.choice(MESSAGES)
        place = rng.choice(PLACES)
        title = f"{exception}: {message} in {place} (#{n})"
        fingerprint = hexid("fingerprint", n, size=32)
        signal_count = 1 + int(rng.expovariate(0.8))
        data = dict(
            self.templates[state, at],
            id=quest_id,
            fingerprint=fingerprint,
            severity=severity,
            severity_floor=severity,
            title=title,
            route=weighted(rng, ROUTES),
            risk=weighted(rng, RISKS),
            signal_count=signal_count,
            created_at=created.isoformat(),
            updated_at=updated.isoformat(),
        )
        if state is S.HANDED_OFF:
            data["claim"] = self.claimant(n, slug)
        quests.append({"quest_id": quest_id, **projection_of(data, hexid("head", n))})
        module, function = place.split(".")
        frames = [
            {"file": f"/srv/app/{module}/{function}.py", "line": 40 + n % 200,
             "function": function, "module": f"{module}.{function}", "in_app": True},
            {"file": f"/srv/app/{module}/views.py", "line": 12, "function": "dispatch",
             "module": f"{module}.views", "in_app": True},
            {"file": "/usr/lib/python3.11/site-packages/django/core/handlers/base.py",
             "line": 197, "function": "_get_response", "module": "django.core.handlers.base",
             "in_app": False},
        ]  # fmt: skip
        for k in range(signal_count):
            received = created + (updated - created) * (k / signal_count)
            signals.append(
                {
                    "signal_id": f"otlp-{hexid('signal', n, k, size=24)}",
                    "quest_id": quest_id,
                    "event": "signal_sensed" if k == 0 else "signal_merged",
                    "source": "log",
                    "severity": severity,
                    "fingerprint": fingerprint,
                    "fingerprint_version": 1,
                    "title": title,
                    "culprit": f"{module}/{function}.py in {function}",
                    "exception_type": exception,
                    "message": message,
                    "service": module,
                    "service_version": "1.4.2",
                    "environment": "production",
                    "trace_id": hexid("trace", n, k, size=32),
                    "span_id": hexid("span", n, k, size=16),
                    "frames": frames,
                    "paths": [f"{module}/{function}.py", f"{module}/views.py"],
                    "occurred_at": received,
                    "received_at": received,
                }
            )
        steps = 1 + rng.randrange(len(AUDITED))
        for k, action in enumerate(AUDITED[:steps]):
            audit.append(
                {
                    "at": created + (updated - created) * (k / steps),
                    "actor": "ephyra" if k < 3 else rng.choice(REVIEWERS),
                    "action": f"quest.{action}",
                    "object": f"quest:{quest_id}",
                    "payload": {
                        "event": f"{quest_id}-e{k + 1}",
                        "revision": 1,
                        "journal_head": hexid("head", n, k),
                        "effects": [],
                    },
                }
            )

    def chained(self, workspace: Workspace, entries: list[dict]) -> list[dict]:
        """``entries`` in time order, numbered and hash-chained after the workspace's last
        entry, as ``ledger.audit`` chains them (``audit verify`` would pass)."""
        last = (
            AuditEntry.objects.filter(workspace=workspace)
            .order_by("-sequence")
            .values_list("sequence", "entry_hash")
            .first()
        )
        sequence, previous = last or (0, GENESIS)
        entries.sort(key=lambda e: e["at"])
        for entry in entries:
            sequence += 1
            entry["sequence"], entry["previous_hash"] = sequence, previous
            content = {
                "sequence": sequence,
                "at": entry["at"].astimezone(UTC).isoformat(),
                "actor": entry["actor"],
                "action": entry["action"],
                "object": entry["object"],
                "payload": entry["payload"],
                "previous_hash": previous,
            }
            entry["entry_hash"] = previous = canonical_digest(content)
        return entries


# -- the one real quest -----------------------------------------------------------------------

CART = "\n".join(
    [
        "from decimal import Decimal",
        "",
        "",
        "def price(item, locale):",
        "    return PRICES[item.sku]",
        "",
        "",
        "def add(cart, item, locale):",
        "    key = (item.sku,)",
        "    cart.lines[key] = cart.lines.get(key, 0) + 1",
        "    cart.total += price(item, locale)",
        "    return cart",
    ]
    + [f"# line {n}" for n in range(80)]
)


def real_commits(repository: str) -> tuple[str, str]:
    """A base commit of the shop's code on ``main`` and a patch commit on top: what the real
    quest's diff, frames and proof point at."""
    repo = pygit2.Repository(repository)
    who = pygit2.Signature("bench", "bench@example.invalid", 1767600000, 0)

    def tree(files: dict[str, str]) -> pygit2.Oid:
        top, shop = repo.TreeBuilder(), repo.TreeBuilder()
        for name, text in files.items():
            shop.insert(name, repo.create_blob(text.encode()), pygit2.GIT_FILEMODE_BLOB)
        top.insert("shop", shop.write(), pygit2.GIT_FILEMODE_TREE)
        top.insert("README.md", repo.create_blob(b"# shop\n"), pygit2.GIT_FILEMODE_BLOB)
        return top.write()

    views = "def dispatch(request):\n    return add(request.cart, request.item, request.locale)\n"
    base = repo.create_commit(
        "refs/heads/main", who, who, "shop", tree({"cart.py": CART, "views.py": views}), []
    )
    fixed = CART.replace("key = (item.sku,)", "key = (item.sku, locale)").replace(
        "return PRICES[item.sku]", "return PRICES[item.sku].get(locale, Decimal(0))"
    )
    head = repo.create_commit(
        "refs/heads/fix", who, who, "key by locale", tree({"cart.py": fixed, "views.py": views}),
        [base],
    )  # fmt: skip
    return str(base), str(head)


SIGNAL = {"fingerprint": "fp-real", "severity": "error", "title": "KeyError: 'locale' in cart.add"}


def real_quest(workspace: Workspace, now: datetime) -> Quest:
    """The quest whose page is timed, applied through the engine (journal, projection, ledger,
    audit), at checkpoint C with a real patch and proof, twenty signals and four comments."""
    base, head = real_commits(workspace.repository)
    story = Story(REAL_QUEST, start=now - timedelta(hours=3))
    value, merged, commented = None, 0, 0
    checks = (
        CheckResult(name="tests", command="pytest", passed=True, duration_ms=48_000),
        CheckResult(name="lint", command="ruff check .", passed=True, duration_ms=3_100),
    )
    while value is None or value.state is not S.READY:
        if value is None:
            event = story("signal_sensed", signal={**SIGNAL, "id": "s1"})
        elif merged < 19 and story.n % 2 == 1:  # a signal between each two steps
            merged += 1
            event = story("signal_merged", signal={**SIGNAL, "id": f"s{merged + 1}"})
        elif commented < 4 and value.state is S.HYPOTHESISED:
            commented += 1
            event = story("comment_added", actor=REVIEWERS[commented], body=f"note {commented}")
        elif value.state is S.PATCHING:
            event = story("patch_recorded", head=head, base=base)
        else:
            event = lifecycle.next_event(story, value, checks=checks)
        decision = quest_apply(workspace, event).applied.decision
        if not decision.accepted:
            raise SystemExit(f"the real quest's {event.type} was refused: {decision.reason}")
        value = decision.quest
    frames = [
        {"file": "/srv/app/shop/cart.py", "line": 5, "function": "price",
         "module": "shop.cart", "in_app": True},
        {"file": "/srv/app/shop/cart.py", "line": 11, "function": "add",
         "module": "shop.cart", "in_app": True},
        {"file": "/srv/app/shop/views.py", "line": 2, "function": "dispatch",
         "module": "shop.views", "in_app": True},
        {"file": "/usr/lib/python3.11/site-packages/django/core/handlers/base.py",
         "line": 197, "function": "_get_response", "module": "django.core.handlers.base",
         "in_app": False},
    ]  # fmt: skip
    insert_rows(
        IngestedSignal,
        workspace,
        [
            {
                "signal_id": f"s{k + 1}",
                "quest_id": REAL_QUEST,
                "event": "signal_sensed" if k == 0 else "signal_merged",
                "source": "log",
                "severity": "error",
                "fingerprint": "fp-real",
                "fingerprint_version": 1,
                "title": "KeyError: 'locale' in cart.add",
                "culprit": "shop/cart.py in price",
                "exception_type": "KeyError",
                "message": "'locale'",
                "service": "shop",
                "environment": "production",
                "frames": frames,
                "paths": ["shop/cart.py", "shop/views.py"],
                "occurred_at": now - timedelta(minutes=k),
                "received_at": now - timedelta(minutes=k),
            }
            for k in range(20)
        ],
    )
    return Quest.objects.get(workspace=workspace, quest_id=REAL_QUEST)


# -- pages ------------------------------------------------------------------------------------

AUDIT_TEMPLATE = Template(
    "<table>{% for e in page %}<tr><td>{{ e.workspace.slug }}</td><td>{{ e.sequence }}</td>"
    "<td>{{ e.at|date:'c' }}</td><td>{{ e.actor }}</td><td>{{ e.action }}</td>"
    "<td>{{ e.object }}</td><td>{{ e.entry_hash|truncatechars:20 }}</td></tr>{% endfor %}"
    "</table><p>Page {{ page.number }} of {{ page.paginator.num_pages }} · "
    "{{ page.paginator.count }} entries</p>"
)


@login_required
def minimal_audit_list(request):
    """``audit_page`` as a page would call it, for the workspaces the person may audit."""
    slugs = sorted(s for s, held in workspace_roles(request.user).items() if allows(held, "audit"))
    page = audit_page(slugs, AuditFilters(), request.GET.get("page") or 1)
    return HttpResponse(AUDIT_TEMPLATE.render(Context({"page": page})))


def audit_url() -> tuple[str, object, str]:
    """Where the audit list is served: the project's ``/audit/``, or the minimal page above
    under a URL configuration of the project's URLs plus that page."""
    try:
        resolve("/audit/")
        return "/audit/", None, "audit list (/audit/)"
    except Resolver404:
        urls = types.ModuleType("inbox_bench_urls")
        urls.urlpatterns = [
            path("bench/audit/", minimal_audit_list),
            path("", include("ephyra.urls")),
        ]
        return "/bench/audit/", urls, "audit list (audit_page + minimal template; no /audit/)"


class DatabaseTime:
    """The time this connection spends in the database (executing and fetching), summed."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, execute, sql, params, many, context):
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - start


class Measured(NamedTuple):
    median: float  # ms by the clock, the median request
    best: float  # ms by the clock, the fastest request: the least disturbed by the machine
    cpu: float  # ms of this process's CPU, the median request
    db: float  # ms waiting for the database's statements, the median request
    queries: int


def timed(client: Client, url: str, requests: int, warmup: int) -> Measured:
    """A page's request time by the clock (median and best), by this process's CPU time and
    in the database's statements (by the clock, as this process waits for them), and the
    queries of one request."""
    for _ in range(warmup):
        answer = client.get(url)
        if answer.status_code != 200:
            raise SystemExit(f"{url}: HTTP {answer.status_code}")
    wall, cpu, db = [], [], []
    for _ in range(requests):
        waited = DatabaseTime()
        with connection.execute_wrapper(waited):
            start, start_cpu = time.perf_counter(), time.process_time()
            client.get(url)
            wall.append((time.perf_counter() - start) * 1e3)
            cpu.append((time.process_time() - start_cpu) * 1e3)
        db.append(waited.seconds * 1e3)
    with CaptureQueriesContext(connection) as captured:
        client.get(url)
    median = statistics.median
    return Measured(median(wall), min(wall), median(cpu), median(db), len(captured))


def vacuum() -> None:
    tables = [m._meta.db_table for m in (Quest, IngestedSignal, AuditEntry)]
    with connection.cursor() as cursor:
        for table in tables:
            if connection.vendor == "postgresql":
                cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(table)}")
            else:
                cursor.execute(f"ANALYZE {connection.ops.quote_name(table)}")


def people(workspaces: dict[str, Workspace]):
    users = get_user_model().objects
    rita = users.create_user("rita", password="bench-only")
    for slug in REVIEWER_IN:
        role_grant(rita, workspaces[slug], Role.REVIEWER)
    for slug in STAFF_IN:
        role_grant(rita, workspaces[slug], Role.STAFF)
    sam = users.create_user("sam", password="bench-only")
    for slug in REVIEWER_IN + STAFF_IN:
        role_grant(sam, workspaces[slug], Role.STAFF)
    root = users.create_superuser("root", password="bench-only")
    return rita, sam, root


def run(sizes: list[int], requests: int, warmup: int) -> str:
    load = os.getloadavg()
    tmp = Path(_DATA.name)
    now = datetime.now(UTC).replace(microsecond=0)
    workspaces = {}
    for slug in WORKSPACES:
        Journal.init(tmp / f"{slug}.git", bare=True)
        workspaces[slug] = Workspace.objects.create(
            slug=slug, name=slug.title(), repository=str(tmp / f"{slug}.git")
        )
    rita, sam, root = people(workspaces)
    seeder = Seeder(workspaces, now)
    quest = real_quest(workspaces["shop"], now)
    audit_path, urlconf, audit_label = audit_url()
    pages = [
        ("inbox (first page, default filters)", "/", rita),
        ("quest page (the real quest)", f"/q/shop/{quest.quest_id}/", rita),
        (audit_label, audit_path, sam),
        ("admin: quest changelist (reference)", "/admin/quests/quest/", root),
        ("admin: audit entry changelist (reference)", "/admin/ledger/auditentry/", root),
    ]
    clients = {}
    for user in (rita, sam, root):
        clients[user.pk] = Client()
        clients[user.pk].force_login(user)
    results: dict[str, list] = {label: [] for label, _, _ in pages}
    seeding = []
    served = {"ALLOWED_HOSTS": ["testserver"]} | ({"ROOT_URLCONF": urlconf} if urlconf else {})
    with override_settings(**served):
        for size in sizes:
            start = time.perf_counter()
            seeder.grow(size - 1 - seeder.seeded)  # the real quest is one of them
            vacuum()
            seeding.append((size, time.perf_counter() - start))
            gc.collect()
            for label, url, user in pages:
                results[label].append(timed(clients[user.pk], url, requests, warmup))
    return table(sizes, pages, results, seeding, seeder, requests, warmup, load)


def table(sizes, pages, results, seeding, seeder, requests, warmup, load) -> str:
    postgres = connection.vendor == "postgresql"
    waiting = Quest.objects.filter(state__in=[str(s) for s in WAITING_STATES]).count()
    total = Quest.objects.count()
    database = connection.settings_dict["NAME"]
    lines = [
        f"# the reviewer dashboard over {' and '.join(f'{n:,}' for n in sizes)} quests "
        f"in {connection.vendor} ({database}); server time per request through Django's test "
        f"client, {requests} requests after {warmup} warm-up: ms by the clock (the median and "
        "the best request), and the median's ms of this process's CPU + ms waiting for the "
        "database",
        f"# Python {platform.python_version()} on {platform.machine()}; at the largest size: "
        f"{total:,} quests, {waiting:,} waiting for a person, {seeder.signals + 20:,} signal rows, "
        f"{AuditEntry.objects.count():,} audit entries",
        f"# seeding ({'COPY, then VACUUM ANALYZE' if postgres else 'INSERT, then ANALYZE'}): "
        + ", ".join(f"{n:,} quests in {s:.1f} s" for n, s in seeding),
        f"# load average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
        f"on {os.cpu_count()} CPUs: a busy machine adds to the clock, not to this process's CPU",
        "",
    ]
    head = "| page |"
    rule = "|---|"
    for n in sizes:
        head += f" ms at {n:,}: median, best | CPU + database | queries |"
        rule += "---:|---:|---:|"
    if len(sizes) > 1:
        head += f" {sizes[-1]:,} ÷ {sizes[0]:,} (median, best) |"
        rule += "---:|"
    lines += [head, rule]
    for label, _, _ in pages:
        row = f"| {label} |"
        for m in results[label]:
            row += f" {m.median:.1f}, {m.best:.1f} | {m.cpu:.1f} + {m.db:.1f} | {m.queries} |"
        if len(sizes) > 1:
            first, last = results[label][0], results[label][-1]
            row += f" {last.median / first.median:.2f}x, {last.best / first.best:.2f}x |"
        lines.append(row)
    inbox = results[pages[0][0]]
    quest_page = results[pages[1][0]]
    lines += [
        "",
        "targets at the largest size, by the median request and by the best one (on a busy "
        "machine the best is nearer what an idle one serves):",
    ]

    def judged(name: str, last: Measured, bound: float, first: Measured | None = None) -> str:
        median, best = last.median, last.best
        if first is not None:  # a ratio to the smallest size
            median, best = median / first.median, best / first.best
        verdicts = [
            f"{what} {f'{value:.2f}x' if first else f'{value:.1f} ms'} "
            f"{'met' if value <= bound else 'MISSED'}"
            for what, value in (("median", median), ("best", best))
        ]
        return f"- {name}: " + "; ".join(verdicts)

    lines.append(judged("inbox ≤ 30 ms", inbox[-1], 30))
    queries = inbox[-1].queries
    lines.append(f"- inbox ≤ 10 queries: {queries} {'met' if queries <= 10 else 'MISSED'}")
    lines.append(judged("quest page ≤ 50 ms", quest_page[-1], 50))
    if len(sizes) > 1:
        lines.append(
            judged(f"inbox within 1.5x of its time at {sizes[0]:,}", inbox[-1], 1.5, inbox[0])
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="quest counts, growing")
    parser.add_argument("--requests", type=int, default=31)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = sorted(int(n) for n in args.sizes.split(","))
    if connection.vendor != "sqlite":  # never the test database a test run may be using
        test = connection.settings_dict.setdefault("TEST", {})
        test["NAME"] = f"{connection.settings_dict['NAME']}_inbox_{os.getpid()}"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        report = run(sizes, args.requests, args.warmup)
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
