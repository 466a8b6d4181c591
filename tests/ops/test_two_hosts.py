"""Two hosts, one workspace: a worker is lost with its disk, and another host carries on.

The production layout: one PostgreSQL, one Redis, one journal remote (a bare repository), and
two Celery workers (``manage.py worker``), each with a data directory of its own (its own
disk: its own mirror of the workspace). The workspace's mirror path is relative to the data
directory, so each host finds it on its own disk. Worker 1 serves quests whose effects go to
the fault harness's world (tests/ledger/world.py); mid-stream it is killed with SIGKILL and its
data directory deleted. Worker 2, waiting for the lease, takes over: it makes a new mirror,
fetches the journals from the remote, checks them against the database, and finishes.

Then: no transition lost (every accepted inbound event is in the journal, every projection at
its journal head), no effect executed twice (the world's record), every journal equal to a
clean replay of its events, and the remote equal to worker 2's mirror.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from journal.apply import first_mismatch
from journal.store import Journal
from ledger.inbound import submit_event
from ledger.models import InboundEvent, Lease, Operation
from quests.models import Quest, Workspace
from quests.workspaces import workspace_policy
from tests.audit_tampering import erase_audit_log
from tests.core.story import Story
from tests.ledger import world
from tests.ledger.harness import (
    RunResult,
    WorkerProcess,
    approve_checkpoints,
    check,
    worker_env,
)
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="two hosts share a PostgreSQL server; two processes on one SQLite file (which "
        "lives in a data directory this test deletes) are not the production layout",
    ),
    pytest.mark.skipif(not settings.REDIS_URL, reason="two hosts share a Redis: set REDIS_URL"),
]
QUESTS = 6
State = Operation.State


def refs(git_dir: Path) -> dict[str, str]:
    out = subprocess.run(
        ["git", "--git-dir", str(git_dir), "for-each-ref", "--format=%(refname) %(objectname)",
         "refs/ephyra/"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return dict(line.split() for line in out.splitlines())


@pytest.fixture
def processes():
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop(signal.SIGTERM)


@pytest.fixture
def hosts(tmp_path):
    remote = tmp_path / "journals.git"
    Journal.init(remote, bare=True)
    ws = Workspace.objects.create(
        slug="shop",
        name="Shop",
        repository="mirrors/shop.git",  # on each host, under its own data directory
        journal_remote=str(remote),
    )
    yield ws, remote
    erase_audit_log()  # the engine's audit rows would refuse the flush after the test


def host(name: str, tmp_path: Path, processes: list) -> tuple[WorkerProcess, Path]:
    data = tmp_path / name
    data.mkdir()
    env = worker_env(
        EPHYRA_DATA_DIR=str(data),
        REDIS_URL=settings.REDIS_URL,
        EPHYRA_LEASE_MS="1500",
        EPHYRA_POLL_MS="30",
        EPHYRA_RETRY_SECONDS="0",
        EPHYRA_EFFECT_ADAPTERS=world.adapters_setting(),
        **{world.FILE_VARIABLE: str(tmp_path / "world.jsonl")},
    )
    worker = WorkerProcess(["manage.py", "worker", "--loglevel", "WARNING"], env, tmp_path / name)
    processes.append(worker)
    return worker, data


def holder_pid() -> int | None:
    owner = Lease.objects.values_list("owner", flat=True).first() or ""
    parts = owner.split(":")
    return int(parts[1]) if len(parts) == 3 else None


def dump(ws: Workspace, worker: WorkerProcess) -> str:
    """What a stuck run looks like: the quests, the unfinished operations, the lease, the
    replica and the worker's last words."""
    from ledger.models import JournalReplica

    lines = [f"{q.quest_id}: {q.state}" for q in Quest.objects.filter(workspace=ws)]
    unfinished = Operation.objects.filter(workspace=ws).exclude(state=State.SUCCEEDED)
    lines += [f"op {op.key}: {op.state}" for op in unfinished]
    pending = InboundEvent.objects.filter(workspace=ws, state=InboundEvent.State.PENDING)
    lines += [f"inbound {row.event_id}: pending" for row in pending]
    lines.append(f"lease: {Lease.objects.filter(workspace=ws).first()}")
    replica = JournalReplica.objects.filter(workspace=ws).first()
    if replica is not None:
        lines.append(f"replica: {replica.unconfirmed} unconfirmed, blocked {replica.blocked!r}")
    return "\n".join([*lines, worker.tail(40)])


def finished(ws: Workspace) -> bool:
    if Quest.objects.filter(workspace=ws, state="closed").count() < QUESTS:
        return False
    if InboundEvent.objects.filter(workspace=ws, state=InboundEvent.State.PENDING).exists():
        return False
    ops = Operation.objects.filter(workspace=ws)
    if ops.exclude(state__in=[State.SUCCEEDED, State.FAILED]).exists():
        return False
    return all(
        applied >= len(outcome.get("events", []))
        for outcome, applied in ops.values_list("outcome", "events_applied")
    )


def test_a_host_lost_with_its_disk_mid_stream_is_replaced_by_another_with_nothing_lost(
    hosts, tmp_path, processes
):
    ws, remote = hosts
    quest_ids = [f"q{i}" for i in range(QUESTS)]
    for quest_id in quest_ids:
        submit_event(
            ws,
            Story(quest_id).signal(fingerprint=f"fp-{quest_id}", severity="fatal"),
            source="test",
        )
    approved: set[str] = set()

    first, data1 = host("host1", tmp_path, processes)
    assert wait_until(lambda: holder_pid() == first.pid, 60), first.tail()
    second, data2 = host("host2", tmp_path, processes)  # waits for the lease

    def mid_stream() -> bool:
        approve_checkpoints(ws, approved)
        done = Operation.objects.filter(workspace=ws, state=State.SUCCEEDED).count()
        return done >= 8 and not finished(ws)

    assert wait_until(mid_stream, 90, interval=0.02), dump(ws, first)
    os.kill(first.pid, signal.SIGKILL)
    first.proc.wait()
    shutil.rmtree(data1)  # the host and its disk are gone

    def carried_on() -> bool:
        approve_checkpoints(ws, approved)
        return finished(ws)

    assert wait_until(carried_on, 120, interval=0.05), dump(ws, second)
    assert holder_pid() == second.pid
    assert Lease.objects.get(workspace=ws).generation >= 2  # a takeover, not a fresh start
    mirror = data2 / "mirrors" / "shop.git"
    assert wait_until(lambda: refs(remote) == refs(mirror), 10)  # the remote has it all
    assert second.stop(signal.SIGTERM) == 0, second.tail()

    ws.repository = str(mirror)  # read host 2's mirror from this process
    result = RunResult(seed=0)
    check(ws, tmp_path / "world.jsonl", quest_ids, result)
    assert result.problems == []  # duplicates, blind retries, lost effects, replay mismatches
    assert result.executions > 0
    journal = Journal(mirror)
    policy = workspace_policy(ws)
    assert [first_mismatch(journal, q, policy) for q in quest_ids] == [None] * QUESTS
    journaled = {q: {e.event.id for e in journal.history(q)} for q in quest_ids}
    accepted = InboundEvent.objects.filter(workspace=ws, state=InboundEvent.State.APPLIED)
    lost = [
        row.event_id
        for row in accepted
        if row.result.get("outcome") == "accepted" and row.event_id not in journaled[row.quest_id]
    ]
    assert lost == []
    assert accepted.count() >= QUESTS
    for row in Quest.objects.filter(workspace=ws):
        assert row.journal_head == str(journal.head(row.quest_id))
