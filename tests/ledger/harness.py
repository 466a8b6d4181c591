"""The fault-injection harness: seeded runs of real worker processes that SIGKILL themselves.

One run is a fresh workspace (a real bare repository, a ``Workspace`` row) with K quests from
fatal signals, served by one worker process at a time (``manage.py worker --standalone``)
started with ``EPHYRA_FAULTS``, so it kills itself at the named points of delivery
(ledger/faults.py). When a worker dies the harness reads the kill point from its stderr and
starts the next one on the next seed of the run's stream. The harness plays the person: it
approves checkpoints A, B and C, and settles what no worker will (a dead letter, an ambiguous
write nobody checks) with ``delivery.resolve`` under its own lease while no worker runs. A run
ends when every quest is closed and no work is left, or at its timeout: then it is stuck, and
its state is dumped.

Then the invariants (``RunResult.problems``): the world executed no key twice; no write was
requested twice without a check that found it absent in between; every effect in every journal
commit has a ledger row that ended succeeded, failed, ambiguous or dead; every projection equals
the fold of its journal and repair finds nothing to change; no inbound event is left pending.

Used by tests/ledger/test_faults.py (a short sample) and benchmarks/faults.py (``make soak``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection
from django.utils import timezone

from ephyra.core.effects import WRITE_EFFECTS, EffectType
from ephyra.core.events import parse_event
from ephyra.core.ports import EffectRequest, EffectResult
from ephyra.core.quest import Quest as QuestValue
from journal.apply import first_mismatch, replay_journal
from journal.store import Journal
from ledger.inbound import submit_event
from ledger.lease import lease_acquire, lease_release
from ledger.models import AuditEntry, InboundEvent, Lease, Operation
from quests.models import Quest, Workspace
from quests.repair import repair_workspace
from quests.workspaces import workspace_policy
from tests.core.story import Story
from tests.ledger import world
from worker import delivery

ROOT = Path(__file__).resolve().parents[2]
State = Operation.State
FINAL = {State.SUCCEEDED, State.FAILED, State.AMBIGUOUS, State.DEAD}
CHECKPOINTS = {"hypothesised": "A", "planned": "B", "ready": "C"}
PERSON = "harness:person"
FAULT_LINE = re.compile(rb"EPHYRA-FAULT (\w+)(?: (\w+) (\S+))?")
# How long a dead letter or an ambiguous write may sit before the person settles it: a worker
# checks an orphaned write in the same step that finds it, so anything older waits for nobody.
SETTLE_AFTER = 1.0


def database_url() -> str:
    """The database this process uses, as a URL for a worker process's ``DATABASE_URL``."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return "sqlite:///" + str(Path(db["NAME"]).resolve())
    if connection.vendor != "postgresql":
        raise NotImplementedError(f"no worker URL for {connection.vendor}")
    login = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        login += ":" + quote(db["PASSWORD"], safe="")
    host = db["HOST"] or "127.0.0.1"
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgres://{login}@{host}{port}/{quote(db['NAME'], safe='')}"


def worker_env(**extra: str) -> dict[str, str]:
    """The environment of a worker process: this process's database and data directory, and
    nothing of its own Ephyra settings, so a test's overrides never leak in unannounced."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("EPHYRA_", "DJANGO_", "CELERY_"))
        and name not in {"DATABASE_URL", "REDIS_URL"}
    }
    env.update(
        DJANGO_SETTINGS_MODULE="ephyra.settings",
        SECRET_KEY=settings.SECRET_KEY,  # the test run's key, which signs nothing real
        DATABASE_URL=database_url(),
        EPHYRA_DATA_DIR=str(settings.DATA_DIR),
        EPHYRA_DOORBELL="false",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def _is_write(effect_type: str) -> bool:
    return EffectType(effect_type) in WRITE_EFFECTS


def _world_read(effect_type: str) -> bool:
    routed = {str(t) for t in world.ROUTED}
    return effect_type in routed and EffectType(effect_type) not in WRITE_EFFECTS


class WorkerProcess:
    """A worker OS process whose stdout and stderr go to files next to the run's records."""

    def __init__(self, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.out, self.err = logs.with_suffix(".out"), logs.with_suffix(".err")
        self.stopped = False  # asked to stop: its exit is not a crash
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, *args], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                stdout=out, stderr=err,
            )  # fmt: skip

    @classmethod
    def standalone(cls, slug: str, env: dict[str, str], logs: Path) -> WorkerProcess:
        return cls(["manage.py", "worker", "--standalone", "--workspace", slug], env, logs)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill_point(self) -> tuple[str, str, str] | None:
        """Where the worker killed itself, and in which effect (type and key; "" where the
        point names none), from its ``EPHYRA-FAULT <point> [<type> <key>]`` line."""
        found = FAULT_LINE.search(self.err.read_bytes())
        if found is None:
            return None
        return tuple((group or b"").decode() for group in found.groups())  # type: ignore[return-value]

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.err.read_text(errors="replace").splitlines()[-lines:])

    def crash(self) -> str:
        """The last error, with the frames of our own code that led to it."""
        lines = self.err.read_text(errors="replace").splitlines()
        start = max((i for i, line in enumerate(lines) if line.startswith("Traceback")), default=0)
        ours = [
            line.strip()
            for line in lines[start:]
            if line.strip().startswith('File "') and "site-packages" not in line
        ]
        return " <- ".join([lines[-1] if lines else "(no output)", *reversed(ours)])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Stop it, and kill it if it does not stop. SIGTERM, not SIGINT: a process started
        from a background job inherits SIGINT ignored. A standalone worker dies at once (its
        lease then expires); a Celery worker and tests/ledger/serve.py stop and release it."""
        self.stopped = True
        if self.alive():
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


@dataclass(frozen=True)
class RunConfig:
    seed: int
    quests: int = 2
    one_in: int = 12  # each kill point reached kills with probability 1/one_in
    points: tuple[str, ...] = ()  # only these kill points (all of them when empty)
    lease_ms: int = 500  # a dead worker's lease expires while the next one starts up
    poll_ms: int = 20
    timeout: float = 120.0

    def faults(self, worker: int) -> str:
        """The ``EPHYRA_FAULTS`` of the run's n-th worker: its own seed, so runs replay."""
        spec = f"{self.seed * 1000 + worker}:{self.one_in}"
        return f"{spec}:{','.join(self.points)}" if self.points else spec


# The lists of a run's result that are violations when not empty.
PROBLEMS = (
    "crashes", "duplicates", "blind_retries", "lost", "stuck", "mismatches", "reads_unanswered",
    "writes_not_ambiguous",
)  # fmt: skip


@dataclass
class RunResult:
    seed: int
    seconds: float = 0.0
    workers: int = 0
    kills: Counter = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)  # exits no kill point explains
    duplicates: list[str] = field(default_factory=list)  # keys the world executed twice
    blind_retries: list[str] = field(default_factory=list)  # writes asked again unchecked
    lost: list[str] = field(default_factory=list)  # journaled effects without a final row
    stuck: list[str] = field(default_factory=list)  # quests not closed when the run ended
    mismatches: list[str] = field(default_factory=list)  # projection vs fold, repair
    inbound_pending: int = 0
    ambiguous: int = 0  # operations that became ambiguous (from the audit log)
    dead: int = 0  # operations dead-lettered (from the audit log)
    ambiguous_left: int = 0  # still ambiguous at the end (the person settles them all)
    resolved: int = 0  # settled by the person
    reads_cut_off: list[str] = field(default_factory=list)  # killed after their call
    writes_cut_off: list[str] = field(default_factory=list)  # killed between claim and outcome
    writes_not_ambiguous: list[str] = field(default_factory=list)  # of those, never ambiguous
    reads_unanswered: list[str] = field(default_factory=list)  # of those, settled unasked
    reads_answered_again: int = 0  # reads asked again (delivered or checked) after their call
    requests: int = 0  # requests the world received
    executions: int = 0
    dump: str = ""

    @property
    def problems(self) -> list[str]:
        found = [
            f"{name}: {', '.join(values)}" for name in PROBLEMS if (values := getattr(self, name))
        ]
        if self.inbound_pending:
            found.append(f"inbound_pending: {self.inbound_pending}")
        return found


def run_once(config: RunConfig, tmp: Path) -> RunResult:
    """One seeded run in ``tmp``, in a workspace of its own (runs may share a database)."""
    started = time.monotonic()
    result = RunResult(config.seed)
    slug = f"f{config.seed}-{uuid.uuid4().hex[:6]}"
    Journal.init(tmp / f"{slug}.git", bare=True)
    ws = Workspace.objects.create(slug=slug, name=slug, repository=str(tmp / f"{slug}.git"))
    world_file = tmp / f"{slug}.world.jsonl"
    quest_ids = [f"{slug}-q{i}" for i in range(config.quests)]  # keys are unique database-wide
    for quest_id in quest_ids:
        signal_event = Story(quest_id).signal(fingerprint=f"fp-{quest_id}", severity="fatal")
        submit_event(ws, signal_event, source="harness")
    run = _Run(config, ws, world_file, tmp, result)
    try:
        run.serve(len(quest_ids))
    finally:
        run.stop_worker()
    check(ws, world_file, quest_ids, result)
    result.seconds = time.monotonic() - started
    return result


class _Run:
    def __init__(self, config: RunConfig, ws: Workspace, world_file: Path, tmp: Path, result):
        self.config, self.ws, self.world_file, self.tmp, self.result = (
            config, ws, world_file, tmp, result,
        )  # fmt: skip
        self.worker: WorkerProcess | None = None
        self.approved: set[str] = set()
        self.unsettled_since: float | None = None

    def env(self) -> dict[str, str]:
        return worker_env(
            EPHYRA_FAULTS=self.config.faults(self.result.workers),
            EPHYRA_LEASE_MS=str(self.config.lease_ms),
            EPHYRA_POLL_MS=str(self.config.poll_ms),
            EPHYRA_RETRY_SECONDS="0",
            EPHYRA_EFFECT_ADAPTERS=world.adapters_setting(),
            **{world.FILE_VARIABLE: str(self.world_file)},
        )

    def serve(self, quests: int) -> None:
        deadline = time.monotonic() + self.config.timeout
        while True:
            if self.worker is None or not self.worker.alive():
                self.reap()
                if self.done(quests):
                    return
                logs = self.tmp / f"{self.ws.slug}.worker{self.result.workers}"
                self.worker = WorkerProcess.standalone(self.ws.slug, self.env(), logs)
                self.result.workers += 1
            approve_checkpoints(self.ws, self.approved)
            if self.done(quests):
                return
            unsettled = list(
                Operation.objects.filter(
                    workspace=self.ws, state__in=[State.AMBIGUOUS, State.DEAD]
                ).values_list("pk", flat=True)
            )
            now = time.monotonic()
            if not unsettled:
                self.unsettled_since = None
            elif self.unsettled_since is None:
                self.unsettled_since = now
            elif now - self.unsettled_since > SETTLE_AFTER:
                self.stop_worker()
                self.settle(unsettled)
                self.unsettled_since = None
            if now > deadline:
                self.result.dump = self.dump()
                return
            time.sleep(0.03)

    def reap(self) -> None:
        """Account for a worker that exited: a kill point, or a crash nobody asked for."""
        worker, self.worker = self.worker, None
        if worker is None:
            return
        code = worker.proc.wait()
        killed = worker.kill_point()
        if killed is not None:
            point, kind, key = killed
            self.result.kills[point] += 1
            if point == "after_call" and _world_read(kind):
                self.result.reads_cut_off.append(key)
            if point in ("after_claim", "after_call") and kind and _is_write(kind):
                self.result.writes_cut_off.append(key)
        elif code != 0 and not worker.stopped:
            self.result.crashes.append(f"worker {worker.pid} exited {code}: {worker.crash()}")

    def stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.reap()

    def done(self, quests: int) -> bool:
        closed = Quest.objects.filter(workspace=self.ws, state="closed").count()
        if closed < quests:
            return False
        if InboundEvent.objects.filter(workspace=self.ws, state=InboundEvent.State.PENDING):
            return False
        ops = Operation.objects.filter(workspace=self.ws)
        if ops.exclude(state__in=[State.SUCCEEDED, State.FAILED]).exists():
            return False
        return all(
            applied >= len(outcome.get("events", []))
            for outcome, applied in ops.values_list("outcome", "events_applied")
        )

    def settle(self, pks: list[int]) -> None:
        """The person at the reconciliation page, while no worker serves the workspace: an
        ambiguous write is looked up in the world; a dead letter is sent round again."""
        owner = f"{PERSON}:{os.getpid()}"
        fence = lease_acquire(self.ws.pk, owner)
        while fence is None:  # a killed worker's lease runs out first
            time.sleep(self.config.lease_ms / 4000)
            fence = lease_acquire(self.ws.pk, owner)
        try:
            for op in Operation.objects.filter(pk__in=pks, state__in=[State.AMBIGUOUS, State.DEAD]):
                if op.state == State.AMBIGUOUS:
                    answer = world.World(self.world_file).check(request_for(self.ws, op))
                else:
                    answer = EffectResult("absent", {"by": PERSON})
                assert answer is not None  # the world can always tell
                delivery.resolve(fence, self.ws, op, answer, actor=PERSON)
                self.result.resolved += 1
        finally:
            lease_release(fence)

    def dump(self) -> str:
        lines = [f"workspace {self.ws.slug}: stuck after {self.config.timeout}s"]
        for row in Quest.objects.filter(workspace=self.ws).order_by("quest_id"):
            lines.append(f"  quest {row.quest_id}: {row.state} at {row.journal_head[:10]}")
        for op in Operation.objects.filter(workspace=self.ws).order_by("id"):
            fed = f"{op.events_applied}/{len(op.outcome.get('events', []))}"
            lines.append(f"  op {op.key}: {op.state} attempts={op.attempts} fed={fed}")
        for row in InboundEvent.objects.filter(workspace=self.ws, state="pending"):
            lines.append(f"  inbound {row.event_id}: pending")
        lease = Lease.objects.filter(workspace=self.ws).first()
        lines.append(f"  lease: {lease}")
        if self.worker is not None:
            lines.append("  worker stderr:\n" + self.worker.tail())
        return "\n".join(lines)


def approve_checkpoints(ws: Workspace, approved: set[str]) -> None:
    """The person approves each checkpoint a quest waits at, once, by a stable event id."""
    waiting = Quest.objects.filter(workspace=ws, state__in=list(CHECKPOINTS))
    for quest_id, state, revision in waiting.values_list("quest_id", "state", "revision"):
        checkpoint = CHECKPOINTS[state]
        event_id = f"{quest_id}-{checkpoint}-r{revision}"
        if event_id in approved:
            continue
        event = parse_event(
            {
                "type": "checkpoint_decided",
                "id": event_id,
                "quest": quest_id,
                "at": timezone.now().isoformat(),
                "actor": PERSON,
                "checkpoint": checkpoint,
                "verdict": "approve",
            }
        )
        submit_event(ws, event, source="harness")
        approved.add(event_id)


def request_for(ws: Workspace, op: Operation) -> EffectRequest:
    return EffectRequest(
        key=op.key,
        type=EffectType(op.type),
        workspace=ws.slug,
        quest_id=op.quest_id,
        payload=op.payload,
        attempt=op.attempts,
    )


def check(ws: Workspace, world_file: Path, quest_ids: list[str], result: RunResult) -> None:
    """The invariants of a finished run, written into ``result``."""
    asked_again = _check_world(world_file, result)
    journal = Journal(ws.repository)
    rows = dict(Operation.objects.filter(workspace=ws).values_list("key", "state"))
    # A read cut off after its call whose outcome was recorded anyway must have been asked
    # again (an obsolete one, whose quest moved on, may end without it).
    result.reads_unanswered.extend(
        key for key in result.reads_cut_off
        if rows.get(key) == State.SUCCEEDED and key not in asked_again
    )  # fmt: skip
    policy = workspace_policy(ws)
    for quest_id in quest_ids:
        replayed = replay_journal(journal, quest_id, policy)
        folded = replayed.fold.quests.get(quest_id)
        if folded is None:
            result.stuck.append(f"{quest_id} (never journaled)")
            continue
        if not replayed.matches:
            result.mismatches.append(f"{quest_id}: {first_mismatch(journal, quest_id, policy)}")
        for entry in journal.history(quest_id):
            for effect in entry.effects:
                state = rows.get(effect["key"])
                if state not in FINAL:
                    result.lost.append(f"{effect['key']} ({state or 'no ledger row'})")
        row = Quest.objects.filter(workspace=ws, quest_id=quest_id).first()
        if row is None or row.journal_head != str(journal.head(quest_id)):
            result.mismatches.append(f"{quest_id}: the projection is not at the journal head")
        elif QuestValue.from_dict(row.data) != folded:
            result.mismatches.append(f"{quest_id}: the projection differs from the fold")
        if str(folded.state) != "closed":
            result.stuck.append(f"{quest_id} ({folded.state})")
    repaired = repair_workspace(ws)
    if repaired.changed:
        result.mismatches.append(repaired.summary())
    result.inbound_pending = InboundEvent.objects.filter(
        workspace=ws, state=InboundEvent.State.PENDING
    ).count()
    audit = AuditEntry.objects.filter(workspace=ws)
    ambiguous = set(audit.filter(action="operation.ambiguous").values_list("object", flat=True))
    result.ambiguous = len(ambiguous)
    # A write cut off between its claim and its outcome cannot be known to be unsent: the next
    # worker must make it ambiguous and ask the world (never send it again blindly).
    result.writes_not_ambiguous.extend(
        key for key in result.writes_cut_off if f"operation:{key}" not in ambiguous
    )
    result.dead = audit.filter(action="operation.dead").count()
    result.ambiguous_left = Operation.objects.filter(workspace=ws, state=State.AMBIGUOUS).count()


def _check_world(world_file: Path, result: RunResult) -> set[str]:
    """Check the world's record; return the reads asked again after they were done."""
    again: set[str] = set()
    executions: Counter[str] = Counter()
    asked: dict[str, bool] = {}  # write key -> requested since the last absent check
    for entry in world.read(world_file):
        key, kind = entry["key"], entry["kind"]
        if kind == "execution":
            executions[key] += 1
            result.executions += 1
        if kind == "request":
            result.requests += 1
        if EffectType(entry["type"]) not in WRITE_EFFECTS:
            # A read asked again (delivered again, or checked) after it was done.
            if kind in ("request", "check") and executions[key] > 0:
                result.reads_answered_again += 1
                again.add(key)
            continue
        if kind == "request":
            if asked.get(key):
                result.blind_retries.append(key)
            asked[key] = True
        elif kind == "check" and not entry["found"]:
            asked[key] = False  # it certainly did not happen: asking again is safe
    result.duplicates.extend(key for key, n in executions.items() if n > 1)
    return again


# --- counting many runs --------------------------------------------------------------------

COLUMNS = (
    "duplicates", "blind_retries", "lost", "stuck", "mismatches", "crashes", "reads_cut_off",
    "reads_unanswered", "writes_cut_off", "writes_not_ambiguous",
)  # fmt: skip


def tally(results: list[RunResult]) -> dict[str, int]:
    counts: Counter[str] = Counter(runs=len(results))
    for result in results:
        counts["workers"] += result.workers
        counts["kills"] += sum(result.kills.values())
        for point, n in result.kills.items():
            counts[f"kills at {point}"] += n
        for name in COLUMNS:
            counts[name] += len(getattr(result, name))
        counts["stuck runs"] += bool(result.stuck)
        counts["inbound_pending"] += result.inbound_pending
        for name in (
            "ambiguous", "ambiguous_left", "dead", "resolved", "requests", "executions",
            "reads_answered_again",
        ):  # fmt: skip
            counts[name] += getattr(result, name)
    return dict(counts)


def table(results: list[RunResult]) -> str:
    from worker.faults import POINTS

    counts = tally(results)
    rows = [
        ("runs", counts["runs"]),
        ("worker processes", counts["workers"]),
        ("kills (SIGKILL)", counts["kills"]),
        *((f"  at {point}", counts.get(f"kills at {point}", 0)) for point in POINTS),
        ("  reads killed after their call", counts["reads_cut_off"]),
        ("  reads answered again from the record", counts["reads_answered_again"]),
        ("world requests", counts["requests"]),
        ("world executions", counts["executions"]),
        ("    succeeded without being asked again", counts["reads_unanswered"]),
        ("duplicates (a key executed twice)", counts["duplicates"]),
        ("blind write retries", counts["blind_retries"]),
        ("lost (journaled effect without a final row)", counts["lost"]),
        ("stuck quests", counts["stuck"]),
        ("stuck runs", counts["stuck runs"]),
        ("projection or repair mismatches", counts["mismatches"]),
        ("inbound events left pending", counts["inbound_pending"]),
        ("unexpected worker exits", counts["crashes"]),
        ("writes killed between claim and outcome", counts["writes_cut_off"]),
        ("  never made ambiguous", counts["writes_not_ambiguous"]),
        ("writes made ambiguous by a kill", counts["ambiguous"]),
        ("  still ambiguous at the end", counts["ambiguous_left"]),
        ("dead letters", counts["dead"]),
        ("settled by the person", counts["resolved"]),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"| {'count'.ljust(width)} | value |", f"|{'-' * (width + 2)}|------:|"]
    lines += [f"| {name.ljust(width)} | {value:5d} |" for name, value in rows]
    return "\n".join(lines)
