"""Benchmark: what routing costs an OTLP export, with open patches to check for conflicts.

``.venv/bin/python benchmarks/triage.py [--patches P] [--exports E] [--records R]``. The
engine first drives P quests (default 100) of one workspace to ``proving``, each with a
patch that is a real commit in the workspace repository changing three files. Then E exports
(default 200) of R error records (default 10) go through ``intake.otlp.services.signals_receive``:
the whole store-route-submit path into the database, without HTTP. Every record has a new
fingerprint whose frames touch no patched file, so each candidate is checked against every
patch, the worst case for the conflict route. Each export runs in a transaction that is rolled
back, so all of them meet the same workspace.

Rows (wall-clock seconds per export, median of E):

- **patch files cached**: ``patch_files`` answers from its cache (commits never change);
- **patch files read per export**: the cache is emptied before each export, so every patch is
  diffed with pygit2 again (what "cache per export" alone would cost);
- **no open patches**: the same exports into a workspace whose quests have no patch, the cost
  of the other routes alone.

Runs on PostgreSQL when DATABASE_URL is set, else SQLite, in a database of its own.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
_DATA = tempfile.TemporaryDirectory(prefix="ephyra-triage-bench-")
os.environ.setdefault("EPHYRA_DATA_DIR", _DATA.name)

import django  # noqa: E402

django.setup()

import pygit2  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from ephyra.core.proof import CheckResult  # noqa: E402
from ephyra.telemetry import PROTOBUF, parse_logs  # noqa: E402
from intake import grouping as triage  # noqa: E402
from intake.otlp.services import signals_receive  # noqa: E402
from intake.otlp.tokens import token_create  # noqa: E402
from journal.store import Journal  # noqa: E402
from quests.engine import quest_apply  # noqa: E402
from quests.models import Quest, Workspace  # noqa: E402
from quests.workspaces import workspace_journal  # noqa: E402
from tests.core.lifecycle_helpers import next_event  # noqa: E402
from tests.core.story import Story  # noqa: E402
from tests.intake.test_triage_routes import commit, export  # noqa: E402

PASSING = (CheckResult(name="tests", passed=True),)
CACHED, UNCACHED, NONE = "patch files cached", "patch files read per export", "no open patches"


def workspace_with_patches(slug: str, patches: int, *, with_patch: bool) -> Workspace:
    path = Path(_DATA.name) / f"{slug}.git"
    Journal.init(path, bare=True)
    workspace = Workspace.objects.create(slug=slug, name=slug, repository=str(path))
    repo = pygit2.Repository(str(path))
    files = {f"pkg/mod{i}.py": "v1\n" for i in range(patches * 3)}
    base = commit(repo, files, [], "base")
    for n in range(patches):
        changed = {**files, **{f"pkg/mod{n * 3 + k}.py": "v2\n" for k in range(3)}}
        head = commit(repo, changed, [base], f"patch {n}")
        story = Story(f"p{n:04d}")
        quest = None
        while quest is None or str(quest.state) != ("proving" if with_patch else "patching"):
            event = next_event(story, quest, checks=PASSING)
            if event.type == "patch_recorded":
                event = story("patch_recorded", head=str(head), base=str(base))
            outcome = quest_apply(workspace, event)
            assert outcome.applied.decision.accepted, outcome.applied.decision.reason
            quest = outcome.applied.decision.quest
    return workspace


def exports(count: int, records: int) -> list[tuple[bytes, object]]:
    bodies = []
    for n in range(count):
        kinds = [
            ("KeyError", (("shop/views.py", f"view{n}_{r}"), (f"shop/h{n}_{r}.py", "run")))
            for r in range(records)
        ]
        request_bytes = b"".join(export(kind, f"'k{n}'") for kind in kinds)
        bodies.append((request_bytes, parse_logs(request_bytes, PROTOBUF)))
    return bodies


def timed(workspace: Workspace, bodies, *, clear_cache: bool) -> list[float]:
    token = token_create(workspace)[0]
    took = []
    for body, result in bodies:
        if clear_cache:
            triage._cache.clear()
        start = time.perf_counter()
        with transaction.atomic():
            signals_receive(
                token,
                result,
                body_digest=hashlib.sha256(body).hexdigest(),
                received_at=datetime.now(UTC),
            )
            transaction.set_rollback(True)
        took.append(time.perf_counter() - start)
    return took


def run(patches: int, count: int, records: int) -> str:
    with_patches = workspace_with_patches("bench-patched", patches, with_patch=True)
    without = workspace_with_patches("bench-plain", patches, with_patch=False)
    assert Quest.objects.filter(workspace=with_patches, state="proving").count() == patches
    workspace_journal(with_patches)  # opened once, as in a serving process
    bodies = exports(count, records)
    timed(with_patches, bodies[:5], clear_cache=False)  # warm the cache and the connection
    rows = {
        CACHED: timed(with_patches, bodies, clear_cache=False),
        UNCACHED: timed(with_patches, bodies, clear_cache=True),
        NONE: timed(without, bodies, clear_cache=False),
    }
    medians = {name: statistics.median(values) for name, values in rows.items()}
    width = max(map(len, rows))
    lines = [
        f"# triage routing on {connection.vendor}: {count} exports of {records} records, "
        f"{patches} open patches of 3 files each",
        "",
        f"| {'routing'.ljust(width)} | median ms/export | records/s |",
        f"|{'-' * (width + 2)}|-----------------:|----------:|",
    ]
    for name, median in medians.items():
        lines.append(f"| {name.ljust(width)} | {median * 1000:16.2f} | {records / median:9.0f} |")
    lines += [
        "",
        f"ratio cached / no open patches: {medians[CACHED] / medians[NONE]:.2f}x",
        f"ratio read per export / cached: {medians[UNCACHED] / medians[CACHED]:.2f}x",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patches", type=int, default=100)
    parser.add_argument("--exports", type=int, default=200)
    parser.add_argument("--records", type=int, default=10)
    args = parser.parse_args(argv)
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        report = run(args.patches, args.exports, args.records)
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
