"""The branch table, one test per row, and terminal absorption.

Spec: the seed's "The branches" table and its terminal rule; docs/lifecycle.md "States",
"Terminal states absorb", and the event sections for paused, resumed, claimed, released, killed.
"""

from __future__ import annotations

import pytest

from ephyra.core.events import EVENT_TYPES
from ephyra.core.machine import decide
from ephyra.core.rules import MachinePolicy
from ephyra.core.states import State
from tests.core.lifecycle_helpers import (
    ACTIVE_STATES,
    CHECKPOINT_AT,
    HOLDER,
    LANDED,
    NEW_BASE,
    accept,
    assert_keys_parse,
    assert_refused,
    drive,
    keys,
    next_event,
    payload,
    sample,
    signal,
    types,
)
from tests.core.story import HEAD

S = State
AGENT_STATES = {S.RESEARCHING, S.REPRODUCING, S.PATCHING}


# --- proving: failed proof ---------------------------------------------------------------------


def test_failed_proof_with_attempts_left_goes_back_to_patching_for_the_next_attempt():
    policy = MachinePolicy(proof_attempts=2)
    story, quest = drive(S.PROVING, policy=policy)
    decision = decide(quest, story("proof_failed", reason="test_locale red"), policy)
    assert decision.outcome == "accepted"
    assert decision.state is S.PATCHING
    assert decision.revision == 1
    assert decision.quest.proof_attempts == 1
    assert keys(decision) == ["q1:1:start_agent:q1-e9:0"]
    agent = payload(decision, "start_agent")
    assert (agent["step"], agent["attempt"]) == ("patch", 2)


@pytest.mark.parametrize("attempts", [1, 2, 3])
def test_failed_proof_parks_when_the_policys_attempts_are_exhausted(attempts):
    policy = MachinePolicy(proof_attempts=attempts)
    story, quest = drive(S.PROVING, policy=policy)
    for _ in range(attempts - 1):
        quest = accept(quest, story("proof_failed", reason="red"), policy).quest
        assert quest.state is S.PATCHING
        quest = accept(quest, next_event(story, quest), policy).quest
        assert quest.state is S.PROVING
    decision = decide(quest, story("proof_failed", reason="still red"), policy)
    assert decision.outcome == "accepted"
    assert decision.state is S.PARKED
    assert decision.quest.park_reason == "proof_attempts_exhausted"
    assert decision.quest.resume_state is S.PROVING
    assert decision.quest.proof_attempts == attempts
    assert keys(decision) == [f"q1:1:notify_inbox:{story.quest}-e{story.n}:0"]
    assert payload(decision, "notify_inbox")["reason"] == "proof_attempts_exhausted"


def test_a_quest_resumed_after_exhausting_proof_gets_a_fresh_set_of_attempts():
    policy = MachinePolicy(proof_attempts=1)
    story, quest = drive(S.PROVING, policy=policy)
    quest = accept(quest, story("proof_failed"), policy).quest
    decision = decide(quest, story("resumed", actor=HOLDER), policy)
    assert decision.state is S.PROVING
    assert decision.quest.proof_attempts == 0
    assert types(decision) == ["run_proof"]


# --- reproducing, landing, watching, rolled_back ----------------------------------------------


def test_a_failure_that_cannot_be_reproduced_parks_and_tells_people():
    story, quest = drive(S.REPRODUCING)
    decision = decide(quest, story("reproduction_failed", reason="passes locally"))
    assert decision.state is S.PARKED
    assert decision.quest.park_reason == "cannot_reproduce"
    assert decision.quest.resume_state is S.REPRODUCING
    assert keys(decision) == ["q1:1:notify_inbox:q1-e6:0"]
    assert payload(decision, "notify_inbox")["reason"] == "cannot_reproduce"


def test_a_quest_parked_as_not_reproducible_resumes_reproducing():
    story, quest = drive(S.REPRODUCING)
    quest = accept(quest, story("reproduction_failed")).quest
    decision = decide(quest, story("resumed", actor=HOLDER))
    assert decision.state is S.REPRODUCING
    assert keys(decision) == ["q1:1:start_agent:q1-e7:0"]
    assert payload(decision, "start_agent")["step"] == "reproduce"


def test_a_base_that_moves_during_landing_sends_the_patch_back_to_be_rebased():
    story, quest = drive(S.LANDING)
    decision = decide(quest, story("base_moved", base=NEW_BASE))
    assert decision.state is S.PATCHING
    assert decision.revision == 1
    assert keys(decision) == ["q1:1:rebase:q1-e11:0"]
    assert payload(decision, "rebase") == {"head": HEAD, "onto": NEW_BASE}
    assert decision.quest.base == NEW_BASE
    assert decision.quest.approval_c is None


def test_a_regression_while_watching_rolls_back_the_landed_commit():
    story, quest = drive(S.WATCHING)
    decision = decide(quest, story("regression_observed", summary="5xx up"))
    assert decision.state is S.ROLLED_BACK
    assert keys(decision) == ["q1:1:rollback:q1-e12:0"]
    assert payload(decision, "rollback")["commit"] == LANDED


def test_a_confirmed_rollback_restarts_research_at_the_next_revision():
    story, quest = drive(S.ROLLED_BACK)
    decision = decide(quest, story("rollback_confirmed", commit=LANDED))
    assert decision.state is S.RESEARCHING
    assert decision.revision == quest.revision + 1 == 2
    assert keys(decision) == ["q1:2:start_agent:q1-e13:0"]
    assert payload(decision, "start_agent")["step"] == "research"
    new = decision.quest
    assert (new.patch_head, new.proof_digest, new.approval_c) == (None, None, None)
    assert new.proof_attempts == 0
    assert_keys_parse(decision)


# --- pause and resume from every active state --------------------------------------------------

PAUSABLE = [s for s in ACTIVE_STATES if s is not S.PARKED]
# What resuming asks for again (docs: "resumed"); a land already asked for is not repeated, a
# rollback is (its adapter confirms a revert already on the base instead of reverting twice).
RESUME_WORK = {
    S.SENSED: ["run_triage"],
    S.TRIAGED: ["start_agent"],
    S.RESEARCHING: ["start_agent"],
    S.HYPOTHESISED: ["request_checkpoint"],
    S.REPRODUCING: ["start_agent"],
    S.PLANNED: ["request_checkpoint"],
    S.PATCHING: ["start_agent"],
    S.PROVING: ["run_proof"],
    S.READY: ["request_checkpoint"],
    S.LANDING: [],
    S.WATCHING: ["start_watch"],
    S.ROLLED_BACK: ["rollback"],
}


@pytest.mark.parametrize("state", PAUSABLE, ids=str)
def test_pausing_any_active_state_parks_the_quest(state):
    story, quest = drive(state)
    decision = decide(quest, story("paused", reason="freeze", actor=HOLDER))
    assert decision.outcome == "accepted"
    assert decision.state is S.PARKED
    assert decision.revision == quest.revision
    assert decision.quest.park_reason == "freeze"
    assert decision.quest.claim is None
    # An auto-routed quest's agent is asked at triage: it may be at work while triaged.
    working = state in AGENT_STATES or state is S.TRIAGED
    expected = [f"q1:1:stop_agent:q1-e{story.n}:0"] if working else []
    assert keys(decision) == expected


@pytest.mark.parametrize("state", PAUSABLE, ids=str)
def test_resuming_a_paused_quest_returns_it_to_the_state_it_was_in(state):
    story, quest = drive(state)
    parked = accept(quest, story("paused", actor=HOLDER)).quest
    decision = decide(parked, story("resumed", actor=HOLDER))
    assert decision.outcome == "accepted"
    # A held review parks as its checkpoint (docs: the claim is released on pause).
    target = quest.resume_state if state is S.HANDED_OFF else state
    assert decision.state is target
    assert decision.revision == quest.revision
    assert decision.quest.park_reason is None
    assert types(decision) == RESUME_WORK[target]
    assert_keys_parse(decision)


def test_a_parked_quest_cannot_be_paused_again():
    story, quest = drive(S.PARKED)
    assert_refused(decide(quest, story("paused")), quest, "the quest is already parked")


def test_only_a_parked_quest_resumes():
    story, quest = drive(S.RESEARCHING)
    reason = "only a parked quest resumes; the quest is researching"
    assert_refused(decide(quest, story("resumed")), quest, reason)


# --- claims at checkpoints ---------------------------------------------------------------------


@pytest.mark.parametrize("state", list(CHECKPOINT_AT), ids=str)
def test_claiming_a_checkpoint_hands_the_review_off_to_that_person(state):
    story, quest = drive(state)
    decision = decide(quest, story("claimed", actor=HOLDER))
    assert decision.state is S.HANDED_OFF
    assert decision.quest.claim == HOLDER
    assert decision.quest.resume_state is state
    assert decision.effects == ()


@pytest.mark.parametrize("state", list(CHECKPOINT_AT), ids=str)
def test_releasing_a_claim_returns_to_the_checkpoint_it_was_at(state):
    story, quest = drive(S.HANDED_OFF, at=state)
    decision = decide(quest, story("released", actor=HOLDER))
    assert decision.state is state
    assert decision.quest.claim is None
    assert keys(decision) == [f"q1:1:request_checkpoint:q1-e{story.n}:0"]
    assert payload(decision, "request_checkpoint")["checkpoint"] == CHECKPOINT_AT[state]


# --- kill and reject ---------------------------------------------------------------------------


@pytest.mark.parametrize("state", ACTIVE_STATES, ids=str)
def test_killing_any_active_state_abandons_the_quest(state):
    story, quest = drive(state)
    decision = decide(quest, story("killed", reason="wontfix", actor=HOLDER))
    assert decision.outcome == "accepted"
    assert decision.state is S.ABANDONED
    assert decision.quest.claim is None
    # An auto-routed quest's agent is asked at triage: it may be at work while triaged.
    working = state in AGENT_STATES or state is S.TRIAGED
    expected = [f"q1:1:stop_agent:q1-e{story.n}:0"] if working else []
    assert keys(decision) == expected


@pytest.mark.parametrize("state", list(CHECKPOINT_AT), ids=str)
def test_a_rejected_checkpoint_abandons_the_quest(state):
    story, quest = drive(state)
    cp = CHECKPOINT_AT[state]
    event = story("checkpoint_decided", checkpoint=cp, verdict="reject", actor=HOLDER)
    decision = decide(quest, event)
    assert decision.state is S.ABANDONED
    assert decision.effects == ()
    assert decision.quest.decisions[-1].verdict == "reject"
    assert decision.quest.decisions[-1].advanced is True


# --- terminal states absorb --------------------------------------------------------------------

# signal_sensed is left out: for an existing quest it is refused ("already exists"), see
# test_lifecycle_creation.py.
ALWAYS_TAKEN = {"signal_sensed", "usage_recorded"}
ABSORBED = [
    (terminal, type_)
    for terminal, also_taken in ((S.CLOSED, {"regression_reopened"}), (S.ABANDONED, set()))
    for type_ in sorted(EVENT_TYPES)
    if type_ not in ALWAYS_TAKEN | also_taken
]


@pytest.mark.parametrize(("terminal", "type_"), ABSORBED, ids=[f"{s}-{t}" for s, t in ABSORBED])
def test_a_terminal_quest_absorbs_events_without_changing(terminal, type_):
    story, quest = drive(terminal)
    decision = decide(quest, sample(story, type_, actor=HOLDER))
    assert decision.outcome == "absorbed"
    assert decision.quest == quest
    assert decision.effects == ()
    assert decision.state is terminal
    assert decision.revision == quest.revision
    assert decision.reason


@pytest.mark.parametrize("terminal", [S.CLOSED, S.ABANDONED], ids=str)
def test_a_terminal_quest_still_records_late_usage(terminal):
    story, quest = drive(terminal)
    decision = decide(quest, sample(story, "usage_recorded"))
    assert decision.outcome == "accepted"
    assert decision.state is terminal
    assert decision.effects == ()
    assert decision.quest.usage.receipts == quest.usage.receipts + 1
    assert decision.quest.usage.cost_micros == quest.usage.cost_micros + 7


def test_a_closed_quest_still_takes_a_regression_reopening():
    story, quest = drive(S.CLOSED)
    decision = decide(quest, story("regression_reopened", signal=signal("s2")))
    assert decision.outcome == "accepted"
    assert decision.state is S.RESEARCHING
    assert decision.revision == 2


def test_an_abandoned_quest_is_not_reopened_by_a_regression():
    story, quest = drive(S.ABANDONED)
    decision = decide(quest, story("regression_reopened", signal=signal("s2")))
    assert decision.outcome == "absorbed"
    assert decision.quest == quest
    assert decision.effects == ()
