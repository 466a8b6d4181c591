"""A worker process killed around a write to the remote (land, rollback): the next worker
settles the operation by its check, and the remote holds the write exactly once.

Real worker processes (``manage.py worker --standalone``) with ``EPHYRA_FAULTS`` set to kill
themselves at the first ``after_claim`` (the write was not sent) or ``after_call`` (it was sent,
and its outcome never recorded), as tests/ledger/harness.py starts them.
"""

from __future__ import annotations

import signal

import pytest

from ledger.models import Operation
from quests.models import Quest, Workspace
from tests.audit_tampering import erase_audit_log
from tests.core.story import Story
from tests.landing.conftest import git
from tests.landing.test_adapters import apply, quest, to_landing, use_policy
from tests.ledger.harness import WorkerProcess, worker_env
from tests.waiting import wait_until
from worker.loop import Worker

pytestmark = pytest.mark.django_db(transaction=True)
State = Operation.State
FIX = ("return sum(items)", "return sum(items or [])")


@pytest.fixture
def shop(repos):
    # The remote keeps a log of every update of its branches: what was written, how often.
    git(repos.remote, "config", "core.logAllRefUpdates", "always")
    ws = Workspace.objects.create(
        slug="shop", name="Shop", repository=str(repos.mirror), remote=str(repos.remote)
    )
    yield ws
    erase_audit_log()  # the engine's audit rows would refuse the flush after the test


@pytest.fixture
def processes():
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop(signal.SIGTERM)


def serve(ws, processes, tmp_path, name: str, **extra: str) -> WorkerProcess:
    env = worker_env(EPHYRA_LEASE_MS="500", EPHYRA_POLL_MS="20", **extra)
    worker = WorkerProcess.standalone(ws.slug, env, tmp_path / name)
    processes.append(worker)
    return worker


def killed_at(point: str, ws, processes, tmp_path) -> WorkerProcess:
    """A worker that dies at the first ``point`` it reaches: the write's."""
    dying = serve(ws, processes, tmp_path, "dying", EPHYRA_FAULTS=f"7:1:{point}")
    assert wait_until(lambda: not dying.alive(), 60), dying.tail()
    assert dying.kill_point()[0] == point, dying.tail()
    return dying


def updates(repos, ref: str = "refs/heads/main") -> list[str]:
    """The commits the remote's main was set to, oldest first (its reflog)."""
    return git(repos.remote, "reflog", "show", "--format=%H", ref).split()[::-1]


@pytest.mark.parametrize("point", ["after_claim", "after_call"])
def test_a_worker_killed_at_the_land_write_leaves_it_done_once(
    point, repos, shop, processes, tmp_path
):
    use_policy(shop, "version: 1\nlanding: {style: merge}\n")  # a new commit is made to land
    base, head = repos.patch([FIX])
    to_landing(shop, Story("q1"), base, head)
    before = updates(repos)

    killed_at(point, shop, processes, tmp_path)
    land = Operation.objects.get(workspace=shop, type="land")
    assert land.state == State.STARTED  # the outcome was never recorded
    sent = point == "after_call"
    assert (repos.tip() != base) is sent

    serve(shop, processes, tmp_path, "next")
    assert wait_until(lambda: str(quest(shop).state) == "watching", 60)

    land.refresh_from_db()
    assert land.state == State.SUCCEEDED
    landed = quest(shop).landed_commit
    assert repos.tip() == landed and repos.parents(landed) == [base, head]
    # Written once: one update of the remote's main, one merge commit on it.
    assert updates(repos) == [*before, landed]
    assert git(repos.remote, "rev-list", "--count", "--merges", "main") == "1"
    if sent:  # settled by the check, not delivered again
        assert (land.attempts, land.outcome["resolved_by"]) == (1, "ephyra:check")
    else:  # the check found nothing sent: delivered again, once
        assert land.attempts == 2


@pytest.mark.parametrize("point", ["after_claim", "after_call"])
def test_a_worker_killed_at_the_rollback_write_leaves_it_done_once(
    point, repos, shop, processes, tmp_path
):
    story = Story("q1")
    base, head = repos.patch([FIX])
    to_landing(shop, story, base, head)
    setup = Worker(owner="setup")
    setup.step()  # lands it
    setup.release()
    assert quest(shop).landed_commit == head
    apply(shop, story("regression_observed", summary="5xx up"))
    before = updates(repos)

    killed_at(point, shop, processes, tmp_path)
    rollback = Operation.objects.get(workspace=shop, type="rollback")
    assert rollback.state == State.STARTED

    serve(shop, processes, tmp_path, "next")
    assert wait_until(lambda: str(quest(shop).state) == "researching", 60)

    rollback.refresh_from_db()
    assert rollback.state == State.SUCCEEDED
    revert = repos.tip()
    assert repos.parents(revert) == [head]
    assert updates(repos) == [*before, revert]
    reverts = git(repos.remote, "log", "--format=%H", "--grep", f"This reverts commit {head}")
    assert reverts.split() == [revert]
    assert rollback.outcome["events"][0]["commit"] == revert
    row = Quest.objects.get(workspace=shop, quest_id="q1")
    assert (row.state, row.revision) == ("researching", 2)
    if point == "after_call":
        assert (rollback.attempts, rollback.outcome["resolved_by"]) == (1, "ephyra:check")
    else:
        assert rollback.attempts == 2
