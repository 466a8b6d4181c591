"""How a quest starts: creation, the triage routes, duplicates, conflicts and regressions.

Spec: the seed's "How a quest starts"; docs/lifecycle.md "Creation and intake".
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from ephyra.core.machine import decide, fold
from ephyra.core.rules import MachinePolicy
from ephyra.core.states import Severity, State
from tests.core.lifecycle_helpers import (
    ACTIVE_STATES,
    HOLDER,
    accept,
    assert_keys_parse,
    assert_refused,
    drive,
    keys,
    next_event,
    payload,
    signal,
    types,
)
from tests.core.story import Story

S = State


# --- triage routes -----------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["auto_fix", "research_only"])
def test_an_automatic_route_starts_research(route):
    story, quest = drive(S.SENSED)
    decision = decide(quest, story("triage_decided", route=route, risk="low"))
    assert decision.outcome == "accepted"
    assert decision.state is S.TRIAGED
    assert (decision.quest.route, decision.quest.risk) == (route, "low")
    assert keys(decision) == ["q1:1:start_agent:q1-e2:0"]
    assert payload(decision, "start_agent")["step"] == "research"
    started = decide(decision.quest, story("research_started"))
    assert started.state is S.RESEARCHING
    assert started.effects == ()  # the agent was already asked for at triage


def test_a_human_route_sends_the_quest_to_the_inbox():
    story, quest = drive(S.SENSED)
    decision = decide(quest, story("triage_decided", route="human"))
    assert decision.state is S.TRIAGED
    assert keys(decision) == ["q1:1:notify_inbox:q1-e2:0"]
    assert "start_agent" not in types(decision)


def test_a_human_routed_quest_does_not_start_without_a_route():
    story, quest = drive(S.TRIAGED, route="human")
    reason = "a human-routed quest needs a route (auto_fix or research_only) to start"
    assert_refused(decide(quest, story("research_started", actor=HOLDER)), quest, reason)


@pytest.mark.parametrize(
    ("policy", "hours"), [(MachinePolicy(), 24), (MachinePolicy(mute_hours=6), 6)]
)
def test_an_ignore_route_abandons_and_mutes_the_fingerprint_from_the_events_time(policy, hours):
    story, quest = drive(S.SENSED, policy=policy)
    event = story("triage_decided", route="ignore")
    decision = decide(quest, event, policy)
    until = event.at + timedelta(hours=hours)
    assert decision.state is S.ABANDONED
    assert keys(decision) == ["q1:1:mute_fingerprint:q1-e2:0"]
    assert payload(decision, "mute_fingerprint") == {
        "fingerprint": "fp1",
        "until": until.isoformat(),
    }
    assert decision.quest.muted_until == until


def test_triage_happens_only_once():
    story, quest = drive(S.TRIAGED)
    reason = "triage happens once, in sensed; the quest is triaged"
    assert_refused(decide(quest, story("triage_decided", route="ignore")), quest, reason)


# --- duplicates --------------------------------------------------------------------------------


def test_a_duplicate_signal_is_merged_into_the_existing_quest():
    story = Story("q1")
    events = [story.signal("s1"), story("signal_merged", signal=signal("s2"))]
    result = fold(events)
    assert result.first_invalid is None
    assert list(result.quests) == ["q1"]
    merged = result.decisions[-1]
    assert keys(merged) == ["q1:1:merge_signal:q1-e2:0"]
    assert payload(merged, "merge_signal") == {"signal": "s2", "into": "q1"}
    assert merged.quest.signal_count == 2
    assert merged.quest.last_signal == "s2"
    assert merged.state is S.SENSED


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ("error", "fatal", "fatal"),
        ("error", "error", "error"),
        ("error", "warning", "error"),
        ("warning", "debug", "warning"),
        ("debug", "info", "info"),
    ],
)
def test_a_merged_signal_raises_the_severity_but_never_lowers_it(first, second, expected):
    story = Story("q1")
    quest = accept(None, story.signal("s1", severity=first)).quest
    merged = decide(quest, story("signal_merged", signal=signal("s2", severity=second))).quest
    assert merged.severity == expected
    assert merged.severity_floor == expected


@pytest.mark.parametrize("state", ACTIVE_STATES, ids=str)
def test_a_duplicate_is_merged_in_every_active_state(state):
    story, quest = drive(state)
    decision = decide(quest, story("signal_merged", signal=signal("s2")))
    assert decision.outcome == "accepted"
    assert decision.state is state
    assert types(decision) == ["merge_signal"]
    assert decision.quest.signal_count == quest.signal_count + 1


def test_a_merged_event_standing_for_many_sightings_counts_them_all():
    story = Story("q1")
    result = fold([story.signal("s1"), story("signal_merged", signal=signal("s2"), count=39_999)])
    assert result.first_invalid is None
    merged = result.decisions[-1]
    assert merged.quest.signal_count == 40_000
    assert keys(merged) == ["q1:1:merge_signal:q1-e2:0"]  # still one effect for the event


@pytest.mark.parametrize("count", [0, -1])
def test_a_merged_event_stands_for_at_least_one_sighting(count):
    story = Story("q1")
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        story("signal_merged", signal=signal("s2"), count=count)


def test_a_signal_with_another_fingerprint_is_not_merged():
    story, quest = drive(S.RESEARCHING)
    event = story("signal_merged", signal=signal("s2", fingerprint="fp2"))
    assert_refused(decide(quest, event), quest, "the signal's fingerprint fp2 is not this quest's")


# --- conflicts: a parked child waits for its parent ---------------------------------------------


def _conflict():
    parent_story, parent = drive(S.PATCHING, "q1")
    child_story = Story("q2")
    created = decide(None, child_story.signal("s2", fingerprint="fp2", parent="q1"))
    return parent_story, parent, child_story, created


def test_a_conflicting_signal_creates_a_parked_child_waiting_for_its_parent():
    _, _, _, created = _conflict()
    child = created.quest
    assert created.outcome == "accepted"
    assert created.state_before is None
    assert (child.id, child.state, child.parent) == ("q2", S.PARKED, "q1")
    assert child.park_reason == "waiting_for_parent"
    assert child.resume_state is S.SENSED
    assert keys(created) == ["q2:1:deliver_child_evidence:q2-e1:0"]
    evidence = payload(created, "deliver_child_evidence")
    assert (evidence["parent"], evidence["child"]) == ("q1", "q2")
    assert evidence["signal"]["id"] == "s2"


def test_the_parent_records_the_child_and_asks_to_resume_it_when_it_lands():
    story, parent, _, _ = _conflict()
    attached = decide(parent, story("child_attached", child="q2", signal=signal("s2", "fp2")))
    assert attached.outcome == "accepted"
    assert attached.state is S.PATCHING
    assert attached.effects == ()
    assert attached.quest.children == ("q2",)
    quest = attached.quest
    while quest.state is not S.LANDING:
        quest = accept(quest, next_event(story, quest)).quest
    landed = decide(quest, next_event(story, quest))
    assert landed.state is S.WATCHING
    n = story.n
    assert keys(landed) == [
        f"q1:1:start_watch:q1-e{n}:0",
        f"q1:1:register_regression_probe:q1-e{n}:0",
        f"q1:1:resume_dependents:q1-e{n}:0",
    ]
    assert payload(landed, "resume_dependents")["children"] == ["q2"]


def test_an_abandoned_parent_also_asks_to_resume_its_dependents():
    story, parent, _, _ = _conflict()
    quest = accept(parent, story("child_attached", child="q2", signal=signal("s2", "fp2"))).quest
    killed = decide(quest, story("killed", actor=HOLDER))
    assert "resume_dependents" in types(killed)
    assert payload(killed, "resume_dependents")["children"] == ["q2"]


def test_the_child_resumes_when_its_parent_lands():
    _, _, story, created = _conflict()
    decision = decide(created.quest, story("parent_landed", parent="q1"))
    assert decision.outcome == "accepted"
    assert decision.state is S.SENSED
    assert decision.quest.park_reason is None
    assert keys(decision) == ["q2:1:run_triage:q2-e2:0"]


def test_a_waiting_child_is_not_resumed_by_a_person():
    _, _, story, created = _conflict()
    child = created.quest
    reason = "this quest waits for its parent q1 to land"
    assert_refused(decide(child, story("resumed", actor=HOLDER)), child, reason)


def test_a_waiting_child_ignores_the_landing_of_another_quest():
    _, _, story, created = _conflict()
    child = created.quest
    reason = "this quest is not waiting for q7"
    assert_refused(decide(child, story("parent_landed", parent="q7")), child, reason)


# --- regressions reopen the closed quest --------------------------------------------------------


def _closed_fatal_quest():
    """A quest whose floor was raised to fatal by a merged signal, then closed."""
    story, quest = drive(S.WATCHING)
    quest = accept(quest, story("signal_merged", signal=signal("s2", severity="fatal"))).quest
    quest = accept(quest, story("watch_clean")).quest
    assert (quest.state, quest.severity_floor) == (S.CLOSED, Severity.FATAL)
    return story, quest


@pytest.mark.parametrize("severity", ["debug", "warning", "error", "fatal"])
def test_a_regression_reopens_the_closed_quest_never_below_its_severity_floor(severity):
    story, quest = _closed_fatal_quest()
    decision = decide(quest, story("regression_reopened", signal=signal("s3", severity=severity)))
    assert decision.outcome == "accepted"
    reopened = decision.quest
    assert reopened.id == quest.id == "q1"
    assert decision.state is S.RESEARCHING
    assert decision.revision == reopened.revision == quest.revision + 1
    assert reopened.severity == reopened.severity_floor == Severity.FATAL
    assert reopened.last_signal == "s3"
    assert reopened.signal_count == quest.signal_count + 1
    assert keys(decision) == [f"q1:2:start_agent:q1-e{story.n}:0"]
    assert payload(decision, "start_agent")["step"] == "research"
    assert_keys_parse(decision)


def test_a_regression_with_a_higher_severity_raises_the_reopened_quest():
    story, quest = drive(S.CLOSED)
    reopened = decide(quest, story("regression_reopened", signal=signal("s2", severity="fatal")))
    assert reopened.quest.severity == reopened.quest.severity_floor == Severity.FATAL


def test_a_regression_with_another_fingerprint_does_not_reopen_the_quest():
    story, quest = drive(S.CLOSED)
    event = story("regression_reopened", signal=signal("s2", fingerprint="fp2"))
    assert_refused(decide(quest, event), quest, "the signal's fingerprint fp2 is not this quest's")


def test_only_a_closed_quest_is_reopened_by_a_regression():
    story, quest = drive(S.WATCHING)
    reason = "only a closed quest is reopened by a regression; the quest is watching"
    assert_refused(decide(quest, story("regression_reopened", signal=signal())), quest, reason)


# --- what does not exist, and what already does ------------------------------------------------


def test_an_event_for_a_quest_that_does_not_exist_is_refused():
    story = Story("q9")
    decision = decide(None, story("triage_decided", route="auto_fix"))
    assert_refused(decision, None, "no quest q9: the first event is signal_sensed")
    assert (decision.state_before, decision.state) == (None, None)
    assert fold([story("research_started")]).first_invalid is not None


@pytest.mark.parametrize("state", [S.SENSED, S.PATCHING, S.PARKED, S.CLOSED, S.ABANDONED], ids=str)
def test_a_second_signal_sensed_for_an_existing_quest_is_refused(state):
    story, quest = drive(state)
    assert_refused(decide(quest, story.signal("s2")), quest, "quest q1 already exists")
