"""Benchmark: how well Ephyra fixes real regressions in real projects, end to end.

``.venv/bin/python benchmarks/effectiveness.py [--cases N] [--project NAME] [--cache DIR]``

Three small open-source projects (``benchmarks/effectiveness_cases.py``: their source
distributions from the package index, pinned by version and SHA-256, cached under
``.ephyra/bench-cache``), 21 regressions injected into Git histories built from their source
(``benchmarks/effectiveness_repos.py``). Each case runs the way production does:

- a live Ephyra: ``manage.py runserver`` and ``manage.py worker --standalone`` as subprocesses,
  on a data directory of their own (SQLite there, or ``DATABASE_URL`` when set);
- a workspace per case, its repository the case's bare remote, its policy proposed and approved
  by two people (the work section: no setup, ``test`` = pytest on the project's suite);
- production (the remote's head checked out) hits the bug once; the OpenTelemetry SDK exports
  the traceback as an OTLP log to the server with the workspace's ingest token;
- the benchmark approves checkpoints A, B and C through ``quests.actions`` as a reviewer, as
  the button on the quest's page does, until the quest has landed or parked.

Per case: the culprit located (the bisected culprit is the injected commit), a proven fix
landed, a revert conflict (parked: no coding agent is configured), a wrong landing (the suite
fails in a clean clone of the base after landing), and the wall time from production's failing
request to the landed commit. Exit 1 when a culprit was missed or a landing was wrong.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.effectiveness_cases import PROJECTS, REGRESSIONS, Regression  # noqa: E402
from benchmarks.effectiveness_repos import (  # noqa: E402
    build_history,
    fetch,
    production_fails,
    suite_passes,
    unpack,
)

TARGET_MEDIAN = 120.0  # seconds, signal to landed, for suites under 10 s
CHECKPOINTS = {"hypothesised": "A", "planned": "B", "ready": "C"}
# The run has its own SQLite database and file broker in its data directory, never the
# developer's database: these variables are not passed on.
ISOLATED = ("DATABASE_URL", "REDIS_URL")
ENDED = {"parked", "abandoned", "handed_off", "closed"}
POLICY = """version: 1
checkpoints: {{A: {{mode: blocking}}, B: {{mode: blocking}}, C: {{mode: blocking}}}}
proof:
  attempts: 2
  matrix: {{low: [tests, probe], medium: [tests, probe], high: [tests, probe]}}
triage:
  default: {{route: auto_fix, risk: low}}
landing: {{style: fast-forward, allow: [merge]}}
watch: {{starts: landing, minutes: 1, min_events: 5}}
work:
  runner: local
  test: [{python}, -m, pytest, -q, -p, no:cacheprovider, {tests}]
  limits: {{test_seconds: 300, probe_seconds: 120}}
"""


@dataclass
class Row:
    project: str
    case: str
    located: bool = False
    landed: bool = False
    conflict: str = "-"  # -, parked, resolved, or not seen by git (the proof parked it)
    wrong: bool | None = None  # None: nothing landed to check
    seconds: float | None = None  # signal to landed
    state: str = ""
    note: str = ""


class Ephyra:
    """A server and a worker on a data directory of their own, for the run's length."""

    def __init__(self, data: Path, port: int):
        self.data, self.port = data, port
        self.url = f"http://127.0.0.1:{port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ISOLATED},
            "EPHYRA_DATA_DIR": str(data),
            "DJANGO_SETTINGS_MODULE": "ephyra.settings",
            "DEBUG": os.environ.get("DEBUG", "true"),
        }
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        manage = [sys.executable, str(ROOT / "manage.py")]
        subprocess.run([*manage, "migrate", "--no-input"], env=self.env, check=True,
                       capture_output=True, cwd=ROOT)
        for args, log in (
            (["runserver", "--noreload", f"127.0.0.1:{self.port}"], "server.log"),
            (["worker", "--standalone"], "worker.log"),
        ):
            with (self.data / log).open("ab") as out:
                self.processes.append(subprocess.Popen(
                    [*manage, *args], env=self.env, cwd=ROOT, stdout=out,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                ))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        raise RuntimeError(f"the server did not answer; see {self.data / 'server.log'}")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def setup_django(data: Path) -> None:
    for name in ISOLATED:
        os.environ.pop(name, None)
    os.environ["EPHYRA_DATA_DIR"] = str(data)
    os.environ["DJANGO_SETTINGS_MODULE"] = "ephyra.settings"  # the server's, even under pytest
    os.environ.setdefault("DEBUG", "true")
    import django

    django.setup()


def people():
    """Who proposes the policies, who approves them, who approves checkpoints."""
    from django.contrib.auth import get_user_model

    users = get_user_model()
    made = []
    for name in ("bench-ops", "bench-lead", "bench-reviewer"):
        user = users.objects.filter(username=name).first()
        made.append(user or users.objects.create_superuser(name, f"{name}@example.org", None))
    return made


def workspace_for(slug: str, regression: Regression, remote: Path):
    from intake.otlp.tokens import token_issue
    from quests.models import Workspace
    from quests.policies import policy_approve, policy_propose
    from quests.roles import Role, role_grant
    from quests.workspaces import workspace_add

    ops, lead, reviewer = people()
    workspace = workspace_add(ops, slug, str(remote), name=f"{regression.project}: {slug}")
    role_grant(lead, workspace, Role.ADMIN)
    role_grant(reviewer, workspace, Role.REVIEWER)
    project = PROJECTS[regression.project]
    text = POLICY.format(python=sys.executable, tests=", ".join(project.tests))
    policy_approve(lead, policy_propose(ops, workspace, text, note="effectiveness benchmark"))
    _, token = token_issue(ops, workspace, name="production")
    return Workspace.objects.get(pk=workspace.pk), token, reviewer


def events(quest, kind: str) -> list:
    from quests.workspaces import workspace_journal

    history = workspace_journal(quest.workspace).history(quest.quest_id)
    return [e.event for e in history if e.event.type == kind]


def follow(workspace, reviewer, started: float, timeout: float):
    """Approve each checkpoint as ``reviewer`` until the quest landed, ended, or time ran out:
    the quest and the seconds from ``started`` to its landing (None when it did not land)."""
    from quests import actions
    from quests.actions import Seen
    from quests.models import Quest

    deadline = started + timeout
    # Asked once per checkpoint and journal head: a decision sent while a sighting moved the
    # head is refused as stale, and the quest, still at the checkpoint, is asked again.
    asked: set[tuple[str, str]] = set()
    quest = None
    while time.monotonic() < deadline:
        quest = Quest.objects.filter(workspace=workspace).order_by("created_at").first()
        if quest is None:
            time.sleep(0.2)
            continue
        if quest.data.get("landed_commit"):
            return quest, time.monotonic() - started
        if quest.state in ENDED:
            return quest, None
        checkpoint = CHECKPOINTS.get(quest.state)
        if checkpoint and (checkpoint, quest.journal_head) not in asked:
            asked.add((checkpoint, quest.journal_head))
            actions.checkpoint_decide(
                reviewer, quest, checkpoint=checkpoint, verdict="approve",
                comment="approved by the effectiveness benchmark",
                seen=Seen(quest.journal_head, quest.revision),
                key=f"bench-{checkpoint}-r{quest.revision}-{quest.journal_head[:16]}",
            )
        time.sleep(0.2)
    return quest, None


def run_case(n: int, regression: Regression, pristine: Path, home: Path, ephyra: Ephyra,
             timeout: float, echo) -> Row:
    row = Row(regression.project, regression.name)
    where = home / f"{n:02d}-{regression.name}"
    where.mkdir(parents=True)
    history = build_history(regression, pristine, where)
    workspace, token, reviewer = workspace_for(f"e{n:02d}-{regression.name}", regression,
                                               history.remote)
    started = time.monotonic()
    production_fails(regression, history, where, ephyra.url, token)
    quest, took = follow(workspace, reviewer, started, timeout)
    if quest is None:
        row.note = f"no quest opened in {timeout:.0f} s"
        return row
    row.state, row.seconds = quest.state, took
    recorded = events(quest, "reproduction_recorded")
    culprit = recorded[-1].evidence.get("culprit") if recorded else None
    row.located = culprit == history.culprit
    if culprit and not row.located:
        row.note = f"culprit {culprit[:12]}, injected {history.culprit[:12]}"
    conflicted = [e for e in events(quest, "patch_failed") if e.reason == "revert_conflict"]
    if conflicted:
        row.conflict = "parked" if took is None else "resolved"
    elif regression.conflict and took is None and quest.park_reason == "proof_attempts_exhausted":
        # git merged the revert without a conflict (a merge driver of the project's own, say)
        # and the proof caught what it got wrong.
        row.conflict = "not seen by git; proof failed, parked"
    if took is not None:
        row.landed = bool(events(quest, "proof_completed"))
        passed, said = suite_passes(PROJECTS[regression.project], history.remote, where)
        row.wrong = not passed
        if not passed:
            row.note = f"suite after landing: {said}"
    elif not row.note:
        why = f" ({quest.park_reason})" if quest.park_reason else ""
        row.note = f"{quest.state}{why}{failed_effects(quest)}"
    echo(f"  {regression.project}/{regression.name}: {describe(row)}")
    return row


def failed_effects(quest) -> str:
    """Why a quest stood still: its effects that failed and what they said."""
    from ledger.models import Operation

    failed = Operation.objects.filter(quest_id=quest.quest_id, state="failed")
    return "".join(f"; {op.type} failed: {(op.outcome or {}).get('detail', {}).get('error', '?')}"
                   for op in failed)


def describe(row: Row) -> str:
    took = "-" if row.seconds is None else f"{row.seconds:.1f} s"
    return (f"located={_yes(row.located)} landed={_yes(row.landed)} conflict={row.conflict} "
            f"wrong={'-' if row.wrong is None else _yes(row.wrong)} time={took} {row.note}")


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def table(rows: list[Row], load: str) -> str:
    lines = [
        "| project | case | culprit located | proven fix landed | conflict | wrong landing "
        "| signal → landed (s) | notes |",
        "|---|---|---|---|---|---|--:|---|",
    ]
    for r in rows:
        took = "-" if r.seconds is None else f"{r.seconds:.1f}"
        wrong = "-" if r.wrong is None else _yes(r.wrong)
        lines.append(f"| {r.project} | {r.case} | {_yes(r.located)} | {_yes(r.landed)} | "
                     f"{r.conflict} | {wrong} | {took} | {r.note} |")
    times = [r.seconds for r in rows if r.seconds is not None]
    located = sum(r.located for r in rows)
    wrong = sum(bool(r.wrong) for r in rows)
    median = statistics.median(times) if times else None
    worst = max(times) if times else None
    conflicts = sum(r.conflict != "-" for r in rows)
    parked = sum("parked" in r.conflict for r in rows)
    lines += [
        "",
        f"cases: {len(rows)}; culprit located: {located}/{len(rows)} (target: all); proven fix "
        f"landed: {sum(r.landed for r in rows)}/{len(rows)}; revert conflicts: {conflicts} "
        f"({parked} parked for a person, {conflicts - parked} resolved); wrong landings: "
        f"{wrong} (target: 0)",
        f"signal → landed: median {_seconds(median)}, worst {_seconds(worst)} over "
        f"{len(times)} landings (target: median < {TARGET_MEDIAN:.0f} s for suites under 10 s)",
        f"machine: {load}",
    ]
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def machine_load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load average {one:.1f} / {five:.1f} / {fifteen:.1f}"


def select(cases: int | None, projects: list[str] | None) -> list[Regression]:
    chosen = [r for r in REGRESSIONS if not projects or r.project in projects]
    return chosen[:cases] if cases else chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, help="run only the first N cases")
    parser.add_argument("--project", action="append", choices=sorted(PROJECTS),
                        help="only this project's cases (repeatable)")
    parser.add_argument("--cache", type=Path, default=ROOT / ".ephyra" / "bench-cache",
                        help="where the pinned distributions are kept (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per case")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("--port", type=int, default=0, help="the server's port (default: free)")
    args = parser.parse_args(argv)
    chosen = select(args.cases, args.project)
    if not chosen:
        parser.error("no case selected")
    home = Path(tempfile.mkdtemp(prefix="ephyra-effectiveness-"))
    pristine = {}
    for name in sorted({r.project for r in chosen}):
        pristine[name] = unpack(fetch(PROJECTS[name], args.cache), home / "sources" / name)
    data = home / "data"
    data.mkdir()
    setup_django(data)
    from demo.production import free_port

    ephyra = Ephyra(data, args.port or free_port())
    print(f"# effectiveness: {len(chosen)} cases; Ephyra at {ephyra.url}, data in {data}",
          flush=True)
    rows = []
    try:
        ephyra.start()
        for n, regression in enumerate(chosen, 1):
            rows.append(run_case(n, regression, pristine[regression.project], home / "cases",
                                 ephyra, args.timeout, lambda line: print(line, flush=True)))
    finally:
        ephyra.stop()
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    print()
    print(table(rows, machine_load()))
    missed = [r for r in rows if not r.located or r.wrong]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
