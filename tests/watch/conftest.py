"""A workspace on a real Git remote with a quest that lands through the worker, and what the
watch reads: deployments, per-minute counts and stored signals, at times the tests choose."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from ephyra.compose import effect_adapters
from ephyra.core.quest import Quest as QuestValue
from intake.deployments import services as deployments
from intake.models import IngestedSignal, MinuteCount
from quests.models import Quest, Workspace
from tests.audit_tampering import erase_audit_log
from tests.core.story import Story
from tests.landing.conftest import Repos, git, repos  # noqa: F401  (a fixture)
from tests.landing.test_adapters import to_landing, use_policy
from work.watch_models import Watch
from worker.loop import Worker

FIX = ("return sum(items)", "return sum(items or [])")
FIXED = "fp1"  # the fingerprint of the quest Story opens
POLICY = """version: 1
watch: {{starts: {starts}, minutes: 30, min_events: 5, max_error_rate_ratio: 2.0,
         max_new_fingerprints: {new}}}
"""


@pytest.fixture
def shop(repos, db, settings, tmp_path, monkeypatch) -> Workspace:  # noqa: F811
    settings.DATA_DIR = tmp_path / "data"
    # The research a rollback asks for is delivered by a test itself, not in a job thread.
    settings.EPHYRA_EFFECT_ADAPTERS = {"start_agent": ""}
    effect_adapters.cache_clear()
    monkeypatch.setattr("worker.loop.JUDGE_SECONDS", 0)  # every pass looks
    monkeypatch.setattr(deployments, "_fetched", {})
    ws = Workspace.objects.create(
        slug="shop", name="Shop", repository=str(repos.mirror), remote=str(repos.remote)
    )
    use_policy(ws, POLICY.format(starts="landing", new=0))
    yield ws
    effect_adapters.cache_clear()
    erase_audit_log()


@pytest.fixture
def worker(shop):
    worker = Worker(owner="w-watch")
    yield worker
    worker.release()


def quest(ws: Workspace, quest_id: str = "q1") -> QuestValue:
    return QuestValue.from_dict(Quest.objects.get(workspace=ws, quest_id=quest_id).data)


def landing(ws: Workspace, repos: Repos) -> str:  # noqa: F811
    """q1 at ``landing`` with a real patch in the mirror; its head (what lands)."""
    base, head = repos.patch([FIX])
    to_landing(ws, Story("q1"), base, head)
    return head


def landed(ws: Workspace, repos: Repos, worker: Worker) -> str:  # noqa: F811
    """q1 landed on the remote (fast-forward) and watching; the landed commit."""
    head = landing(ws, repos)
    worker.step()
    value = quest(ws)
    assert (str(value.state), value.landed_commit) == ("watching", head)
    return head


def minutes_ago(n: float) -> datetime:
    return timezone.now() - timedelta(minutes=n)


def count(ws: Workspace, fingerprint: str, at: datetime, signals: int) -> None:
    """``signals`` of ``fingerprint`` in ``at``'s minute, as intake counts them."""
    minute = at.astimezone(UTC).replace(second=0, microsecond=0)
    MinuteCount.objects.create(
        workspace=ws, fingerprint=fingerprint, minute=minute, signals=signals
    )


def stored(ws: Workspace, fingerprint: str, at: datetime, path: str) -> None:
    """A stored signal of ``fingerprint`` whose innermost in-app frame is in ``path``."""
    IngestedSignal.objects.create(
        workspace=ws,
        signal_id=f"sig-{fingerprint}",
        quest_id=f"q-{fingerprint}",
        event=IngestedSignal.Event.SENSED,
        source="log",
        severity="error",
        fingerprint=fingerprint,
        fingerprint_version=1,
        title="TypeError",
        exception_type="TypeError",
        frames=[{"file": path, "line": 2, "function": "total", "module": None, "in_app": True}],
        paths=[path],
        received_at=at,
    )


def watch(ws: Workspace) -> Watch:
    return Watch.objects.get(workspace=ws, quest_id="q1", revision=1)


def settle(worker: Worker, passes: int = 4) -> None:
    """A few passes of the worker: apply what was submitted, deliver, sweep."""
    for _ in range(passes):
        worker.step()
