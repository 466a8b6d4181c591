"""Worker processes, for real: ``manage.py worker`` under Celery, and two workers racing.

(a) The Celery worker (solo pool, late acks) on the embedded filesystem broker, and on Redis
when ``REDIS_URL`` is set, serves a quest from its signal to closed. Its loop polls only every
ten minutes here, so each step is the doorbell this test process rings through the broker
when it submits an event: the test proves the bell reaches the worker, not that polling works.

(b) Two workers race for one workspace, and only the lease holder's writes land:

1. Worker A takes the lease, claims the quest's ``land`` operation, and the world executes the
   write; A is then held (``EPHYRA_WORLD_GATE``) after the world answered and before A records
   the outcome — the moment a long call or a GC pause would catch a real worker.
2. Worker B starts and cannot take the lease: A's heartbeat thread keeps it alive.
3. A is frozen with SIGSTOP (heartbeat and all; never while it holds a database lock, so B is
   not blocked by a frozen transaction). Its lease expires; B takes it over at generation 2,
   finds A's started ``land`` orphaned, makes it ambiguous, checks the world (found: A's write
   landed), feeds ``landed`` and carries the quest to closed.
4. The database and the journal are snapshotted; A is released (the gate opens) and SIGCONT
   resumes it with its stale generation-1 fence. Its next write, recording the outcome it still
   holds, must be refused (``LeaseLost``, counted in ``Worker.refused``), and the snapshot must
   not change: nothing A wrote after losing the lease reaches the journal or the database.

(c) The same race one step earlier: A is frozen after its claim and before its write is sent.
B takes over, checks the write (absent: nothing left A) and delivers it. When A wakes, its
adapter asks the ledger whether the claim still holds, right before sending (the
``still_holder`` a write adapter calls last): it does not, so nothing is sent twice.

(d) On the embedded SQLite file a worker taking a lease waits while another process writes.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import DatabaseError, connection, transaction

from ephyra.celery import app
from ephyra.core.proof import CheckResult
from ephyra.environment import filesystem_broker
from journal.store import Journal
from ledger.inbound import submit_event
from ledger.lease import lease_acquire
from ledger.models import AuditEntry, InboundEvent, Lease, Operation
from quests.engine import quest_apply
from quests.models import Quest, Workspace
from tests.audit_tampering import erase_audit_log
from tests.core.lifecycle_helpers import next_event
from tests.core.story import Story
from tests.ledger import world
from tests.ledger.harness import WorkerProcess, approve_checkpoints, worker_env
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
State = Operation.State
LEASE_MS = 1000


@pytest.fixture
def workspace(tmp_path):
    Journal.init(tmp_path / "mirror.git", bare=True)
    ws = Workspace.objects.create(slug="shop", name="Shop", repository=str(tmp_path / "mirror.git"))
    yield ws
    erase_audit_log()  # the engine's audit rows would refuse the flush after the test


@pytest.fixture
def processes():
    """Every worker process a test starts, stopped (and reaped) however the test ends."""
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        if worker.alive():
            os.kill(worker.pid, signal.SIGCONT)  # a frozen process cannot act on SIGTERM
        worker.stop(signal.SIGTERM)


def world_entries(path: Path) -> list[dict]:
    return list(world.read(path))


# --- (a) the Celery worker and its doorbell ------------------------------------------------


@pytest.fixture(params=["filesystem", "redis"])
def broker(request, settings, tmp_path):
    """This process's Celery producer pointed at the worker's broker: the filesystem folders
    under a temporary data directory, or the Redis database of REDIS_URL."""
    data = tmp_path / "data"
    env: dict[str, str] = {"EPHYRA_DATA_DIR": str(data)}
    if request.param == "redis":
        if not django_settings.REDIS_URL:
            pytest.skip("REDIS_URL is not set")
        env["REDIS_URL"] = django_settings.REDIS_URL
        url = django_settings.REDIS_URL
        options: dict = {"visibility_timeout": django_settings.EPHYRA_VISIBILITY_TIMEOUT}
    else:
        url = "filesystem://"
        options = filesystem_broker(data / "broker")  # as ephyra/settings.py builds it
    settings.EPHYRA_DOORBELL = True
    before = (app.conf.broker_url, app.conf.broker_transport_options)
    app.conf.update(broker_url=url, broker_transport_options=options)
    app._after_fork()  # Celery's own reset: drop pooled connections made for the old broker
    yield env
    app.conf.update(broker_url=before[0], broker_transport_options=before[1])
    app._after_fork()


def test_the_celery_worker_serves_a_quest_from_signal_to_closed_on_its_doorbell(
    workspace, broker, processes, tmp_path
):
    world_file = tmp_path / "world.jsonl"
    env = worker_env(
        EPHYRA_POLL_MS="600000",  # ten minutes: only the doorbell wakes the loop in time
        EPHYRA_EFFECT_ADAPTERS=world.adapters_setting(),
        **{world.FILE_VARIABLE: str(world_file)},
        **broker,
    )
    worker = WorkerProcess(["manage.py", "worker", "--loglevel", "WARNING"], env, tmp_path / "w")
    processes.append(worker)
    # The worker's loop starts when Celery's consumer is ready; its first step takes the lease.
    assert wait_until(lambda: Lease.objects.exclude(owner="").exists(), 60), worker.tail()

    story = Story("q1")
    submit_event(workspace, story.signal(severity="fatal"), source="test")
    seen: list[str] = []
    approved: set[str] = set()

    def progressed() -> bool:
        quest = Quest.objects.filter(workspace=workspace).first()
        if quest is not None and (not seen or seen[-1] != quest.state):
            seen.append(quest.state)
        approve_checkpoints(workspace, approved)
        # The closing transition asks for effects of its own (the regression probe): wait for
        # those too, not only for the state the projection shows first.
        busy = Operation.objects.filter(
            workspace=workspace, state__in=[State.PENDING, State.STARTED]
        )
        return quest is not None and quest.state == "closed" and not busy.exists()

    assert wait_until(progressed, 90, interval=0.1), f"{seen}\n{worker.tail()}"
    # The journal, not the polling above, says which states the quest went through: a quest
    # approved as soon as it asks can pass through one between two looks at the projection.
    history = Journal(workspace.repository).history("q1")
    assert {"hypothesised", "planned", "ready", "closed"} <= {str(e.quest.state) for e in history}
    assert worker.alive(), worker.tail()

    assert not InboundEvent.objects.filter(state=InboundEvent.State.PENDING).exists()
    assert InboundEvent.objects.filter(state=InboundEvent.State.APPLIED).count() == 4
    ops = Operation.objects.filter(workspace=workspace)
    assert set(ops.values_list("state", flat=True)) <= {State.SUCCEEDED, State.FAILED}
    land = ops.get(type="land")
    assert (land.state, land.attempts) == (State.SUCCEEDED, 1)
    executed = [e["key"] for e in world_entries(world_file) if e["kind"] == "execution"]
    assert len(executed) == len(set(executed))  # nothing was done twice
    assert worker.stop(signal.SIGTERM) == 0, worker.tail()
    # A clean shutdown hands the lease back, so the next worker need not wait for it to expire.
    assert Lease.objects.get(workspace=workspace).owner == ""


# --- (b) two workers racing for one workspace ----------------------------------------------


def drive_to_landing(ws: Workspace) -> None:
    """Main-line events applied directly (test set-up), up to the land operation."""
    story, quest = Story("q1"), None
    while quest is None or quest.state != "landing":
        event = next_event(story, quest, checks=(CheckResult(name="tests", passed=True),))
        outcome = quest_apply(ws, event)
        assert outcome.applied.decision.accepted, outcome.applied.decision.reason
        quest = outcome.applied.decision.quest


def serve(ws: Workspace, name: str, tmp_path: Path, **extra: str) -> WorkerProcess:
    env = worker_env(
        EPHYRA_LEASE_MS=str(LEASE_MS),
        EPHYRA_POLL_MS="20",
        EPHYRA_EFFECT_ADAPTERS=world.adapters_setting(),
        **{world.FILE_VARIABLE: str(tmp_path / "world.jsonl")},
        **extra,
    )
    return WorkerProcess(["-m", "tests.ledger.serve", "--workspace", ws.slug], env, tmp_path / name)


def reported(worker: WorkerProcess) -> dict:
    """The last counters the worker printed (tests/ledger/serve.py)."""
    lines = [line for line in worker.out.read_text().splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def lease_row_locked(ws: Workspace) -> bool:
    """Does some transaction hold a lock a takeover would wait for (checked without waiting)?"""
    if connection.vendor == "sqlite":
        # Another process's lock on the file: EXCLUSIVE also waits for a frozen reader.
        probe = sqlite3.connect(connection.settings_dict["NAME"], timeout=0)
        try:
            probe.execute("BEGIN EXCLUSIVE")
            probe.rollback()
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            probe.close()
    try:
        with transaction.atomic():
            Lease.objects.select_for_update(nowait=True).filter(workspace=ws).first()
        return False
    except DatabaseError:
        return True


def freeze_outside_a_write(worker: WorkerProcess, ws: Workspace) -> None:
    """SIGSTOP, but never while the worker holds a database lock (its heartbeat's UPDATE, say):
    a frozen transaction would block the other worker, which is not the race under test."""
    for _ in range(200):
        os.kill(worker.pid, signal.SIGSTOP)
        if not lease_row_locked(ws):
            return
        os.kill(worker.pid, signal.SIGCONT)
        time.sleep(0.005)
    raise AssertionError("the worker never let go of its database locks")


def snapshot(ws: Workspace) -> dict:
    journal = Journal(ws.repository)
    return {
        "operations": list(
            Operation.objects.filter(workspace=ws)
            .order_by("key")
            .values_list(
                "key", "state", "owner", "generation", "attempts", "outcome", "events_applied"
            )
        ),
        "quests": list(
            Quest.objects.filter(workspace=ws).values_list("quest_id", "state", "journal_head")
        ),
        "journal": {
            quest: [str(oid) for oid in journal.commits(head)]
            for quest, head in journal.heads().items()
        },
        "audit": list(
            AuditEntry.objects.filter(workspace=ws).values_list("sequence", "entry_hash")
        ),
        "inbound": list(InboundEvent.objects.filter(workspace=ws).values_list("event_id", "state")),
        "lease": Lease.objects.filter(workspace=ws).values_list("owner", "generation").first(),
    }


def closed_by_now(ws: Workspace) -> bool:
    quest = Quest.objects.get(workspace=ws, quest_id="q1")
    busy = Operation.objects.filter(workspace=ws, state__in=[State.PENDING, State.STARTED])
    return quest.state == "closed" and not busy.exists()


def gated(world_file: Path) -> bool:
    return any(entry["kind"] == "gate" for entry in world_entries(world_file))


def test_only_the_lease_holder_writes_and_a_frozen_worker_is_refused_when_it_wakes(
    workspace, processes, tmp_path
):
    drive_to_landing(workspace)
    land = Operation.objects.get(workspace=workspace, type="land")
    world_file, gate = tmp_path / "world.jsonl", tmp_path / "gate"

    a = serve(workspace, "a", tmp_path, **{world.GATE_VARIABLE: f"land:after:{gate}"})
    processes.append(a)
    assert wait_until(lambda: gated(world_file), 60), a.tail()
    owner_a = reported(a)["owner"]
    land.refresh_from_db()
    assert (land.state, land.owner, land.generation) == (State.STARTED, owner_a, 1)

    # B races for the lease while A's heartbeat keeps it: B waits and writes nothing.
    b = serve(workspace, "b", tmp_path)
    processes.append(b)
    assert wait_until(lambda: reported(b).get("owner"), 60), b.tail()
    time.sleep(3 * LEASE_MS / 1000)
    assert Lease.objects.filter(workspace=workspace).values_list("owner", "generation").get() == (
        owner_a,
        1,
    )
    assert reported(b)["counts"]["delivered"] == 0
    assert {e["pid"] for e in world_entries(world_file)} == {a.pid}

    freeze_outside_a_write(a, workspace)
    owner_b = reported(b)["owner"]
    assert wait_until(lambda: closed_by_now(workspace), 60), b.tail()
    lease = Lease.objects.get(workspace=workspace)
    assert (lease.owner, lease.generation) == (owner_b, 2)
    land.refresh_from_db()
    # B took the orphaned claim over (generation 2), asked the world, and found A's write.
    assert (land.state, land.generation, land.outcome["resolved_by"]) == (
        State.SUCCEEDED,
        2,
        "ephyra:check",
    )
    before = snapshot(workspace)

    gate.touch()
    os.kill(a.pid, signal.SIGCONT)
    assert wait_until(lambda: reported(a)["refused"] >= 1, 30), a.tail()
    time.sleep(3 * LEASE_MS / 1000)  # give A every chance to write anything else it would

    assert snapshot(workspace) == before
    assert reported(a)["counts"]["delivered"] == 0  # its one delivery never got recorded
    assert reported(b)["refused"] == 0 and reported(b)["counts"]["delivered"] >= 1
    entries = world_entries(world_file)
    executions = [(e["key"], e["pid"]) for e in entries if e["kind"] == "execution"]
    assert executions.count((land.key, a.pid)) == 1
    assert [e["pid"] for e in entries if e["key"] == land.key and e["kind"] == "check"] == [b.pid]
    landed = [e for e in Journal(workspace.repository).history("q1") if e.event.type == "landed"]
    assert len(landed) == 1


def test_a_worker_frozen_between_its_claim_and_the_call_does_not_run_the_write_again(
    workspace, processes, tmp_path
):
    drive_to_landing(workspace)
    land = Operation.objects.get(workspace=workspace, type="land")
    world_file, gate = tmp_path / "world.jsonl", tmp_path / "gate"
    # A claims land and is held just before its request leaves; then it is frozen.
    a = serve(workspace, "a", tmp_path, **{world.GATE_VARIABLE: f"land:before:{gate}"})
    processes.append(a)
    assert wait_until(lambda: gated(world_file), 60), a.tail()
    freeze_outside_a_write(a, workspace)
    # B takes over: the orphaned write is checked (absent: nothing was sent), then delivered.
    b = serve(workspace, "b", tmp_path)
    processes.append(b)
    assert wait_until(lambda: closed_by_now(workspace), 60), b.tail()
    checks = [e for e in world_entries(world_file) if e["key"] == land.key and e["kind"] == "check"]
    assert [(e["pid"], e["found"]) for e in checks] == [(b.pid, False)]
    before = snapshot(workspace)

    gate.touch()
    os.kill(a.pid, signal.SIGCONT)
    assert wait_until(lambda: reported(a)["refused"] >= 1, 30), a.tail()
    assert snapshot(workspace) == before

    # A's adapter asked whether its claim still held, right before sending: it did not.
    entries = [e for e in world_entries(world_file) if e["key"] == land.key]
    assert [(e["kind"], e["pid"]) for e in entries if e["kind"] != "gate"] == [
        ("check", b.pid),
        ("request", b.pid),
        ("execution", b.pid),
        ("withheld", a.pid),
    ]


# --- (d) workers beside other writers of the embedded SQLite database ----------------------


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's own locking")
def test_taking_a_lease_waits_while_another_process_writes_the_sqlite_file(workspace):
    other = sqlite3.connect(
        connection.settings_dict["NAME"], timeout=0, isolation_level=None, check_same_thread=False
    )
    other.execute("BEGIN IMMEDIATE")  # another process in the middle of a write transaction
    done = threading.Timer(0.5, other.rollback)
    done.start()
    try:
        fence = lease_acquire(workspace.pk, "w1")  # must wait its turn, as any write does
    finally:
        done.join()
        other.close()
    assert fence is not None and fence.generation == 1
