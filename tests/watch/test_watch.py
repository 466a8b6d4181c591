"""The watch after a fix landed, judged by the worker from intake's per-minute counts and
stored frames: clean when the window ends quiet, a regression at once when the fixed error
comes back, new errors appear in the patched files, or other errors rise; the rollback then
reverts the landed commit and the quest researches again at revision 2."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ephyra.compose import build, dependencies
from ephyra.core.effects import EffectType
from ephyra.core.events import Paused, Resumed
from ephyra.core.ports import EffectRequest
from intake.deployments.services import deployment_record
from ledger.models import Operation
from quests.workspaces import workspace_journal
from tests.core.lifecycle_helpers import HOLDER
from tests.landing.test_adapters import apply, use_policy
from tests.watch.conftest import (
    FIXED,
    POLICY,
    count,
    landed,
    minutes_ago,
    quest,
    settle,
    stored,
    watch,
)


def deploy(ws, commit: str, at):
    return deployment_record(ws, commit=commit, source="test", at=at).deployment


def last_event(ws, type_: str):
    history = workspace_journal(ws).history("q1")
    return next(entry.event for entry in reversed(history) if entry.event.type == type_)


def test_a_window_without_the_error_ends_clean_with_its_figures(repos, shop, worker):
    head = landed(shop, repos, worker)
    deploy(shop, head, minutes_ago(40))  # 30 minutes of window, over 10 minutes ago
    count(shop, "fp-other", minutes_ago(50), 3)  # before the deployment
    count(shop, "fp-other", minutes_ago(35), 2)  # within the window

    settle(worker)

    assert str(quest(shop).state) == "closed"
    clean = last_event(shop, "watch_clean")
    figures = clean.evidence["figures"]
    assert (figures["minutes"], figures["fixed_seen"], figures["new_fingerprints"]) == (30, 0, [])
    assert (figures["other_errors"], figures["other_before"]) == (2, 3)
    assert clean.evidence["deployed"] == clean.evidence["landed"] == head
    assert clean.summary.startswith("no regression in 30 min: the fixed error was not seen")
    assert watch(shop).state == "clean"


def test_a_window_still_open_is_not_judged_clean(repos, shop, worker):
    head = landed(shop, repos, worker)
    deploy(shop, head, minutes_ago(5))

    settle(worker)

    assert str(quest(shop).state) == "watching"
    opened = watch(shop)
    assert opened.state == "open" and opened.judged_at is not None
    assert opened.figures["fixed_seen"] == 0 and 4 <= opened.figures["minutes"] <= 5


def rolled_back(repos, shop, worker, signals: int = 7) -> str:
    """The fixed error keeps firing after the deployment: the quest rolls back; the head."""
    head = landed(shop, repos, worker)
    deploy(shop, head, minutes_ago(5))
    count(shop, FIXED, minutes_ago(2), signals)
    settle(worker, 6)
    return head


def test_an_error_that_keeps_firing_is_rolled_back_before_the_window_ends(repos, shop, worker):
    head = rolled_back(repos, shop, worker)

    value = quest(shop)
    assert (str(value.state), value.revision, value.landed_commit) == ("researching", 2, None)
    revert = repos.tip()
    assert repos.parents(revert) == [head]
    assert repos.read(revert) == repos.read(f"{head}^")  # the fix is reverted on the remote
    assert Operation.objects.get(workspace=shop, type="rollback").state == "succeeded"
    regression = last_event(shop, "regression_observed")
    assert regression.summary.startswith("the fixed error was seen again: 7 signals in ")
    assert regression.evidence["figures"]["fixed_seen"] == 7
    assert last_event(shop, "rollback_confirmed").commit == revert
    assert watch(shop).ends_at > timezone.now()  # before the window ended


def test_the_fixed_error_in_the_deployments_own_minute_is_not_counted(repos, shop, worker):
    head = landed(shop, repos, worker)
    at = minutes_ago(5)
    deploy(shop, head, at)
    count(shop, FIXED, at, 3)  # that minute may hold signals of the old code

    settle(worker)

    assert str(quest(shop).state) == "watching"


@pytest.mark.parametrize(("allowed", "verdict"), [(0, "regression"), (1, "open")])
def test_new_errors_in_the_patched_files_are_judged_against_the_boundary(
    allowed, verdict, repos, shop, worker
):
    if allowed:
        use_policy(shop, POLICY.format(starts="landing", new=allowed))
    head = landed(shop, repos, worker)
    deploy(shop, head, minutes_ago(5))
    for fingerprint, path in [("fp-new", "app.py"), ("fp-elsewhere", "billing.py")]:
        stored(shop, fingerprint, minutes_ago(2), path)
        count(shop, fingerprint, minutes_ago(2), 1)
    stored(shop, "fp-old", minutes_ago(20), "app.py")  # seen before the deployment: not new
    count(shop, "fp-old", minutes_ago(20), 1)
    count(shop, "fp-old", minutes_ago(2), 1)

    settle(worker)

    judged = watch(shop)
    assert (judged.state, judged.figures["new_fingerprints"]) == (verdict, ["fp-new"])
    if verdict == "regression":
        assert last_event(shop, "regression_observed").summary == (
            "1 new error fingerprints in the patched files (at most 0 allowed)"
        )
        assert str(quest(shop).state) == "researching"
    else:
        assert str(quest(shop).state) == "watching"


@pytest.mark.parametrize(
    ("after", "before", "verdict"),
    [
        (4, 0, "open"),  # fewer than min_events (5): too few to judge a rate
        (5, 0, "regression"),  # 5 in 3 min against a clean baseline
        (10, 300, "open"),  # 3.3/min against 10/min before: not above 2x
        (60, 30, "regression"),  # 20/min against 1/min before
    ],
)
def test_other_errors_are_judged_by_their_rate_against_before(
    after, before, verdict, repos, shop, worker
):
    head = landed(shop, repos, worker)
    at = minutes_ago(3.5)
    deploy(shop, head, at)
    if before:
        count(shop, "fp-other", minutes_ago(20), before)
    count(shop, "fp-other", minutes_ago(1), after)

    settle(worker)

    judged = watch(shop)
    assert (judged.state, judged.figures["other_errors"]) == (verdict, after)
    if verdict == "regression":
        assert last_event(shop, "regression_observed").evidence["figures"]["other_errors"] == after


def test_a_watch_begun_at_landing_moves_to_the_deployment(repos, shop, worker):
    head = landed(shop, repos, worker)
    begun = watch(shop)
    assert begun.deployed_commit == "" and begun.ends_at == begun.since + timedelta(minutes=30)
    at = timezone.now()
    deploy(shop, head, at)

    settle(worker)

    moved = watch(shop)
    assert (moved.since, moved.deployed_commit, moved.environment) == (at, head, "production")
    assert moved.ends_at == at + timedelta(minutes=30)


def test_research_after_a_rollback_names_the_failed_fix_and_its_figures(
    repos, shop, worker, settings
):
    head = rolled_back(repos, shop, worker)
    research = Operation.objects.filter(workspace=shop, type="start_agent").latest("id")
    assert research.payload == {"step": "research", "revision": 2}
    adapter = build("work.steps.StartAgentAdapter", dependencies())

    result = adapter.run(
        EffectRequest(
            key=research.key,
            type=EffectType.START_AGENT,
            workspace="shop",
            quest_id="q1",
            payload=research.payload,
            attempt=1,
        )
    )

    (hypothesis,) = [e for e in result.events if e.type == "hypothesis_written"]
    previous = hypothesis.evidence["previous_revision"]
    assert (previous["revision"], previous["landed"], previous["deployed"]) == (1, head, head)
    assert (previous["verdict"], previous["figures"]["fixed_seen"]) == ("regression", 7)
    assert previous["summary"].startswith("the fixed error was seen again: 7 signals")
    assert hypothesis.summary.startswith(
        f"Revision 1 landed {head} and was rolled back: the fixed error was seen again"
    )


def test_a_paused_watch_ends_and_resuming_the_quest_watches_again(repos, shop, worker):
    head = landed(shop, repos, worker)
    deploy(shop, head, minutes_ago(5))
    settle(worker)
    now = timezone.now()
    apply(shop, Paused(id="pause-1", quest="q1", at=now, actor=HOLDER, reason="a look"))
    settle(worker)
    assert watch(shop).state == "ended"

    apply(shop, Resumed(id="resume-1", quest="q1", at=now, actor=HOLDER))
    count(shop, FIXED, minutes_ago(1), 2)
    settle(worker, 6)

    assert watch(shop).state == "regression"
