"""What the forge reports: a deployment that carries a landed commit out, and CI checks on a
patch head.

Spec: the seed's main line (landing → watching: "deployed and under observation", start_watch
is post-landing observation) and "What invalidates an approval at C" (a forge check is not in
that list, so it invalidates nothing; it holds an approval not yet given). docs/lifecycle.md
"deployment_observed", "checks_reported" and "When the watch starts".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ephyra.core.events import EVENT_TYPES
from ephyra.core.machine import decide, fold
from ephyra.core.quest import Quest
from ephyra.core.rules import MachinePolicy, WatchStart
from tests.core.lifecycle_helpers import (
    ACTIVE_STATES,
    DEPLOYED,
    HOLDER,
    LANDED,
    NEW_BASE,
    NEW_HEAD,
    S,
    accept,
    assert_keys_parse,
    assert_refused,
    drive,
    keys,
    next_event,
    passed,
    payload,
    sample,
    types,
)
from tests.core.story import HEAD, Story

FROM_DEPLOYMENT = MachinePolicy(watch_from=WatchStart.DEPLOYMENT)
REQUIRED = MachinePolicy(required_checks={"medium": ("tests",)})


def deployed(story, *, commit: str = DEPLOYED, includes: str = LANDED, env: str = "production"):
    return story("deployment_observed", commit=commit, includes=includes, environment=env)


def checks(story, *results: tuple[str, bool], head: str = HEAD):
    return story(
        "checks_reported",
        head=head,
        checks=[{"name": name, "passed": ok} for name, ok in results],
    )


# --- deployment_observed ------------------------------------------------------------------------


def test_by_default_the_watch_starts_at_landing_and_a_deployment_is_only_noted():
    story, quest = drive(S.WATCHING)
    event = deployed(story)
    decision = accept(quest, event)
    assert decision.state is S.WATCHING
    assert decision.effects == ()
    q = decision.quest
    assert (q.deployed_commit, q.deployed_to, q.deployed_at) == (DEPLOYED, "production", event.at)


def test_watching_from_the_deployment_landing_asks_for_no_watch_yet():
    story, quest = drive(S.LANDING, policy=FROM_DEPLOYMENT)
    decision = accept(quest, next_event(story, quest), FROM_DEPLOYMENT)
    assert decision.state is S.WATCHING
    assert types(decision) == ["register_regression_probe"]


def test_watching_from_the_deployment_the_deployment_opens_the_window():
    story, quest = drive(S.WATCHING, policy=FROM_DEPLOYMENT)
    event = deployed(story)
    decision = accept(quest, event, FROM_DEPLOYMENT)
    assert keys(decision) == [f"q1:1:start_watch:{event.id}:0"]
    assert payload(decision, "start_watch") == {
        "commit": LANDED,
        "minutes": 30,
        "deployed": DEPLOYED,
        "environment": "production",
        "since": event.at.isoformat(),
    }
    assert_keys_parse(decision)


def test_a_deployment_of_exactly_the_landed_commit_counts():
    story, quest = drive(S.WATCHING, policy=FROM_DEPLOYMENT)
    decision = accept(quest, deployed(story, commit=LANDED), FROM_DEPLOYMENT)
    assert payload(decision, "start_watch")["deployed"] == LANDED


def test_a_window_that_never_opened_cannot_end_clean():
    story, quest = drive(S.WATCHING, policy=FROM_DEPLOYMENT)
    decision = decide(quest, story("watch_clean"), FROM_DEPLOYMENT)
    assert_refused(
        decision, quest, f"the watch has not started: no deployment of {LANDED} was observed"
    )
    opened = accept(quest, deployed(story), FROM_DEPLOYMENT).quest
    assert accept(opened, story("watch_clean"), FROM_DEPLOYMENT).state is S.CLOSED


def test_a_regression_rolls_back_even_before_the_deployment_was_seen():
    story, quest = drive(S.WATCHING, policy=FROM_DEPLOYMENT)
    decision = accept(quest, story("regression_observed", summary="5xx"), FROM_DEPLOYMENT)
    assert decision.state is S.ROLLED_BACK


def test_resuming_a_watch_that_has_not_opened_asks_for_no_watch():
    story, quest = drive(S.WATCHING, policy=FROM_DEPLOYMENT)
    parked = accept(quest, story("paused", actor=HOLDER), FROM_DEPLOYMENT).quest
    assert accept(parked, story("resumed", actor=HOLDER), FROM_DEPLOYMENT).effects == ()
    opened = accept(quest, deployed(story), FROM_DEPLOYMENT).quest
    parked = accept(opened, story("paused", actor=HOLDER), FROM_DEPLOYMENT).quest
    resumed = accept(parked, story("resumed", actor=HOLDER), FROM_DEPLOYMENT)
    assert payload(resumed, "start_watch")["deployed"] == DEPLOYED


def test_a_deployment_without_the_landed_commit_is_refused():
    story, quest = drive(S.WATCHING)
    decision = decide(quest, deployed(story, includes=NEW_HEAD))
    assert_refused(
        decision, quest, f"the deployment includes {NEW_HEAD}, not the landed commit {LANDED}"
    )


def test_a_second_deployment_is_refused_the_watch_follows_the_first():
    story, quest = drive(S.WATCHING, policy=FROM_DEPLOYMENT)
    quest = accept(quest, deployed(story), FROM_DEPLOYMENT).quest
    decision = decide(quest, deployed(story, commit=NEW_BASE, env="eu"), FROM_DEPLOYMENT)
    assert_refused(
        decision, quest, f"the watch already follows the deployment of {DEPLOYED} to production"
    )


@pytest.mark.parametrize("state", [s for s in ACTIVE_STATES if s is not S.WATCHING], ids=str)
def test_a_deployment_is_refused_before_the_quest_has_landed_or_after(state):
    story, quest = drive(state, at=S.READY)
    decision = decide(quest, sample(story, "deployment_observed", actor=HOLDER))
    assert_refused(
        decision, quest, f"a deployment is observed for a landed quest; the quest is {state}"
    )


def test_a_new_revision_forgets_the_deployment():
    story, quest = drive(S.WATCHING)
    quest = accept(quest, deployed(story)).quest
    quest = accept(quest, story("regression_observed")).quest
    quest = accept(quest, story("rollback_confirmed")).quest
    assert (quest.revision, quest.deployed_commit, quest.deployed_to, quest.deployed_at) == (
        2,
        None,
        None,
        None,
    )


# --- checks_reported ----------------------------------------------------------------------------


def test_a_failing_check_on_the_patch_is_noted_and_people_are_told():
    story, quest = drive(S.PROVING)
    event = checks(story, ("lint", False), ("tests", True))
    decision = accept(quest, event)
    assert decision.state is S.PROVING
    assert (decision.quest.checks_head, decision.quest.failing_checks) == (HEAD, ("lint",))
    assert keys(decision) == [f"q1:1:notify_inbox:{event.id}:0"]
    assert payload(decision, "notify_inbox") == {
        "reason": "forge_check_failed",
        "head": HEAD,
        "checks": ["lint"],
        "required": [],
        "state": "proving",
    }


def test_the_same_failure_reported_again_tells_nobody_twice():
    story, quest = drive(S.PROVING)
    quest = accept(quest, checks(story, ("lint", False))).quest
    again = accept(quest, checks(story, ("lint", False)))
    assert again.effects == () and again.quest.failing_checks == ("lint",)


def test_a_check_that_passes_on_a_rerun_no_longer_fails():
    story, quest = drive(S.PROVING)
    quest = accept(quest, checks(story, ("lint", False), ("tests", False))).quest
    decision = accept(quest, checks(story, ("tests", True)))
    assert decision.quest.failing_checks == ("lint",) and decision.effects == ()


def test_the_last_result_of_a_name_in_one_report_counts():
    story, quest = drive(S.PROVING)
    decision = accept(quest, checks(story, ("tests", False), ("tests", True)))
    assert decision.quest.failing_checks == () and decision.effects == ()


def test_a_failing_check_does_not_fail_the_proof_ephyras_bundle_is_the_proof():
    story, quest = drive(S.PROVING, policy=REQUIRED)
    quest = accept(quest, checks(story, ("tests", False)), REQUIRED).quest
    assert quest.state is S.PROVING and quest.proof_attempts == 0
    proof = next_event(story, quest, checks=passed("tests"))
    assert accept(quest, proof, REQUIRED).state is S.READY


def test_a_failing_required_check_holds_c_until_it_passes():
    story, quest = drive(S.READY, policy=REQUIRED, checks=passed("tests"))
    quest = accept(quest, checks(story, ("tests", False)), REQUIRED).quest
    approve = story("checkpoint_decided", checkpoint="C", verdict="approve", actor=HOLDER)
    assert_refused(
        decide(quest, approve, REQUIRED),
        quest,
        f"required check tests failed on the forge for {HEAD}; C waits",
    )
    quest = accept(quest, checks(story, ("tests", True)), REQUIRED).quest
    approve = story("checkpoint_decided", checkpoint="C", verdict="approve", actor=HOLDER)
    assert accept(quest, approve, REQUIRED).state is S.LANDING


def test_a_failing_check_the_policy_does_not_require_holds_nothing():
    story, quest = drive(S.READY, policy=REQUIRED, checks=passed("tests"))
    quest = accept(quest, checks(story, ("lint", False)), REQUIRED).quest
    approve = story("checkpoint_decided", checkpoint="C", verdict="approve", actor=HOLDER)
    assert accept(quest, approve, REQUIRED).state is S.LANDING


def test_a_held_c_can_still_be_revised_or_rejected():
    story, quest = drive(S.READY, policy=REQUIRED, checks=passed("tests"))
    quest = accept(quest, checks(story, ("tests", False)), REQUIRED).quest
    revise = story("checkpoint_decided", checkpoint="C", verdict="revise", actor=HOLDER)
    assert accept(quest, revise, REQUIRED).state is S.PATCHING


def test_a_new_head_is_not_held_by_the_old_heads_failure():
    story, quest = drive(S.READY, policy=REQUIRED, checks=passed("tests"))
    quest = accept(quest, checks(story, ("tests", False)), REQUIRED).quest
    quest = accept(quest, story("human_revision", head=NEW_HEAD, actor=HOLDER), REQUIRED).quest
    proof = next_event(story, quest, checks=passed("tests"))
    quest = accept(quest, proof, REQUIRED).quest
    approve = story("checkpoint_decided", checkpoint="C", verdict="approve", actor=HOLDER)
    assert accept(quest, approve, REQUIRED).state is S.LANDING


def test_while_landing_a_failure_is_told_and_the_landing_still_lands():
    """The land write was already asked for; refusing its outcome would lose the landing."""
    story, quest = drive(S.LANDING, policy=REQUIRED, checks=passed("tests"))
    decision = accept(quest, checks(story, ("tests", False)), REQUIRED)
    assert payload(decision, "notify_inbox")["required"] == ["tests"]
    assert decision.quest.approval_c == quest.approval_c
    assert accept(decision.quest, story("landed", commit=LANDED), REQUIRED).state is S.WATCHING


def test_checks_arrive_while_a_review_is_held():
    story, quest = drive(S.HANDED_OFF, at=S.READY)
    decision = accept(quest, checks(story, ("tests", False)).model_copy(update={"actor": "ci"}))
    assert decision.state is S.HANDED_OFF and decision.quest.failing_checks == ("tests",)


def test_checks_on_another_head_are_refused():
    story, quest = drive(S.READY)
    decision = decide(quest, checks(story, ("tests", False), head=NEW_HEAD))
    assert_refused(decision, quest, f"the checks are for {NEW_HEAD}, not the patch head {HEAD}")


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (S.RESEARCHING, "no patch is recorded; checks are reported on a patch head"),
        (S.WATCHING, "the patch has landed; its checks decide nothing now (the quest is watching)"),
        (
            S.ROLLED_BACK,
            "the patch has landed; its checks decide nothing now (the quest is rolled_back)",
        ),
    ],
    ids=str,
)
def test_checks_are_refused_where_they_decide_nothing(state, reason):
    story, quest = drive(state)
    assert_refused(decide(quest, checks(story, ("tests", False))), quest, reason)


def test_checks_on_the_old_head_while_a_new_patch_is_written_are_refused():
    story, quest = drive(S.PROVING)
    quest = accept(quest, story("proof_failed", reason="red")).quest
    assert quest.state is S.PATCHING
    assert_refused(
        decide(quest, checks(story, ("tests", False))),
        quest,
        "checks decide something once a patch is proving; the quest is patching",
    )


def test_the_new_fields_survive_a_round_trip_and_a_replay():
    story, quest = drive(S.READY)
    events = [checks(story, ("tests", False))]
    quest = accept(quest, events[0]).quest
    assert Quest.from_dict(quest.to_dict()) == quest
    story, watching = drive(S.WATCHING)
    watching = accept(watching, deployed(story)).quest
    assert Quest.from_dict(watching.to_dict()) == watching


def test_folding_a_history_with_both_events_gives_the_same_decisions_twice():
    story = Story("q1")
    events, quest = [], None
    while quest is None or quest.state is not S.WATCHING:
        event = next_event(story, quest)
        events.append(event)
        quest = accept(quest, event, FROM_DEPLOYMENT).quest
        if quest.state is S.PROVING:
            events.append(checks(story, ("lint", False)))
            quest = accept(quest, events[-1], FROM_DEPLOYMENT).quest
    events += [deployed(story), story("watch_clean")]
    first, second = fold(events, FROM_DEPLOYMENT), fold(events, FROM_DEPLOYMENT)
    assert first.first_invalid is None
    assert first.quest.state is S.CLOSED
    assert [d.to_dict() for d in first.decisions] == [d.to_dict() for d in second.decisions]


def test_every_event_type_is_documented_with_its_fields():
    text = (Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md").read_text("utf-8")
    missing = [t for t in sorted(EVENT_TYPES) if f"**`{t}`**" not in text]
    assert missing == []
