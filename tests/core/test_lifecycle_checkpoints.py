"""Checkpoints A, B and C: blocking, advisory and shadow modes, revise, and C invalidation.

Spec: the seed's "Checkpoints in detail" and "What invalidates an approval at C";
docs/lifecycle.md "checkpoint_decided", "Checkpoints" and "What invalidates a C approval".
"""

from __future__ import annotations

import pytest

from ephyra.core.machine import decide
from ephyra.core.rules import CheckpointMode
from ephyra.core.states import State
from tests.core.lifecycle_helpers import (
    ACTIVE_STATES,
    HOLDER,
    NEW_BASE,
    NEW_HEAD,
    accept,
    assert_refused,
    drive,
    keys,
    next_event,
    payload,
    policy_with,
    signal,
    types,
)
from tests.core.story import BASE, bundle_for

S = State
MODEL = "judgement-jev/jev-1.14"
AT = {"A": S.HYPOTHESISED, "B": S.PLANNED, "C": S.READY}
APPROVED_TO = {"A": S.REPRODUCING, "B": S.PATCHING, "C": S.LANDING}
ADVISORY = policy_with(CheckpointMode.ADVISORY, thresholds={MODEL: 0.8})
STALE = "sha256:" + "0" * 64


def _automatic(model=MODEL, confidence=0.8, checks=(("cites_evidence", True),)):
    return {
        "evaluation": "ev1",
        "model": model,
        "confidence": confidence,
        "checks": [{"name": n, "passed": p} for n, p in checks],
    }


def _decide(story, quest, cp, verdict="approve", policy=ADVISORY, automatic=None):
    fields = {"checkpoint": cp, "verdict": verdict}
    if automatic is not None:
        fields |= {"automatic": automatic, "actor": automatic["model"]}
    else:
        fields["actor"] = HOLDER
    return decide(quest, story("checkpoint_decided", **fields), policy)


def _assert_recorded_not_advanced(decision, quest, cp, verdict="approve"):
    assert decision.outcome == "accepted"
    assert decision.state is quest.state
    assert decision.effects == ()
    assert decision.revision == quest.revision
    assert len(decision.quest.decisions) == len(quest.decisions) + 1
    record = decision.quest.decisions[-1]
    assert (record.checkpoint, record.verdict, record.advanced) == (cp, verdict, False)


# --- blocking ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cp", ["A", "B", "C"])
def test_a_blocking_checkpoint_is_requested_with_blocking_true(cp):
    story, quest = drive({"A": S.RESEARCHING, "B": S.REPRODUCING, "C": S.PROVING}[cp])
    request = payload(decide(quest, next_event(story, quest)), "request_checkpoint")
    assert request == {"checkpoint": cp, "mode": "blocking", "blocking": True}


@pytest.mark.parametrize("cp", ["A", "B", "C"])
def test_a_blocking_checkpoint_refuses_an_automatic_decision(cp):
    story, quest = drive(AT[cp])
    decision = _decide(
        story,
        quest,
        cp,
        policy=policy_with(CheckpointMode.BLOCKING, thresholds={MODEL: 0.1}),
        automatic=_automatic(confidence=1.0),
    )
    reason = f"checkpoint {cp} is blocking: it waits for a person, not a model"
    assert_refused(decision, quest, reason)


def test_a_decision_for_a_checkpoint_that_is_not_open_is_refused():
    story, quest = drive(S.HYPOTHESISED)
    reason = "checkpoint B is not open; the quest is hypothesised"
    assert_refused(_decide(story, quest, "B"), quest, reason)


# --- advisory ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cp", ["A", "B", "C"])
@pytest.mark.parametrize("confidence", [0.8, 0.95])
def test_an_advisory_checkpoint_advances_on_a_confident_checked_model_decision(cp, confidence):
    story, quest = drive(AT[cp], policy=ADVISORY)
    decision = _decide(story, quest, cp, automatic=_automatic(confidence=confidence))
    assert decision.outcome == "accepted"
    assert decision.state is APPROVED_TO[cp]
    record = decision.quest.decisions[-1]
    assert (record.advanced, record.model, record.confidence) == (True, MODEL, confidence)


@pytest.mark.parametrize(
    "model",
    ["judgement-jev/jev-1.15", "judgement-jev/jev-1.1", "Judgement-jev/jev-1.14", "jev-1.14"],
)
def test_a_lookalike_model_identity_does_not_inherit_the_threshold(model):
    story, quest = drive(S.HYPOTHESISED, policy=ADVISORY)
    decision = _decide(story, quest, "A", automatic=_automatic(model=model, confidence=0.99))
    _assert_recorded_not_advanced(decision, quest, "A")
    assert decision.quest.decisions[-1].model == model


def test_a_model_decision_below_the_threshold_is_recorded_and_waits():
    story, quest = drive(S.PLANNED, policy=ADVISORY)
    decision = _decide(story, quest, "B", automatic=_automatic(confidence=0.79))
    _assert_recorded_not_advanced(decision, quest, "B")
    assert decision.quest.decisions[-1].confidence == 0.79
    assert decision.quest.decisions[-1].note


@pytest.mark.parametrize(
    "checks",
    [(), (("cites_evidence", False),), (("cites_evidence", True), ("matches_probe", False))],
    ids=["no-checks", "failed", "one-of-two-failed"],
)
def test_a_model_decision_without_all_evidence_checks_passed_does_not_advance(checks):
    story, quest = drive(S.READY, policy=ADVISORY)
    decision = _decide(story, quest, "C", automatic=_automatic(confidence=0.99, checks=checks))
    _assert_recorded_not_advanced(decision, quest, "C")
    assert decision.quest.approval_c is None


@pytest.mark.parametrize("cp", ["A", "B", "C"])
def test_a_person_still_advances_an_advisory_checkpoint(cp):
    story, quest = drive(AT[cp], policy=ADVISORY)
    decision = _decide(story, quest, cp)
    assert decision.state is APPROVED_TO[cp]
    assert decision.quest.decisions[-1].advanced is True


# --- shadow -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cp", ["A", "B", "C"])
@pytest.mark.parametrize("verdict", ["approve", "revise", "reject"])
@pytest.mark.parametrize("by_model", [False, True], ids=["person", "model"])
def test_a_shadow_checkpoint_records_every_decision_and_never_advances(cp, verdict, by_model):
    shadow = policy_with(CheckpointMode.SHADOW, thresholds={MODEL: 0.8}, only=cp)
    story, quest = drive(AT[cp], policy=shadow)
    automatic = _automatic(confidence=1.0) if by_model else None
    decision = _decide(story, quest, cp, verdict, policy=shadow, automatic=automatic)
    _assert_recorded_not_advanced(decision, quest, cp, verdict)


def test_a_shadow_checkpoint_keeps_recording_repeated_decisions():
    shadow = policy_with(CheckpointMode.SHADOW, only="A")
    story, quest = drive(S.HYPOTHESISED, policy=shadow)
    for verdict in ("approve", "reject", "approve"):
        event = story("checkpoint_decided", checkpoint="A", verdict=verdict, actor=HOLDER)
        quest = accept(quest, event, shadow).quest
    assert quest.state is S.HYPOTHESISED
    assert [d.verdict for d in quest.decisions] == ["approve", "reject", "approve"]
    assert not any(d.advanced for d in quest.decisions)


def test_a_shadow_approval_at_c_is_not_recorded_as_a_c_approval():
    # docs: shadow decisions are "recorded (advanced: false)"; only an applied approval binds
    # approval_c to the proof digest. The machine's own note says "recorded, not applied".
    shadow = policy_with(CheckpointMode.SHADOW, only="C")
    story, quest = drive(S.READY, policy=shadow)
    decision = _decide(story, quest, "C", policy=shadow)
    _assert_recorded_not_advanced(decision, quest, "C")
    assert decision.quest.approval_c is None


# --- revise, and research-only ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cp", "target", "step"),
    [("A", S.RESEARCHING, "research"), ("B", S.REPRODUCING, "plan"), ("C", S.PATCHING, "patch")],
)
def test_revise_returns_to_the_earlier_step_and_restarts_its_agent(cp, target, step):
    story, quest = drive(AT[cp])
    decision = _decide(story, quest, cp, "revise")
    assert decision.state is target
    assert decision.revision == 1
    assert keys(decision) == [f"q1:1:start_agent:q1-e{story.n}:0"]
    assert payload(decision, "start_agent")["step"] == step
    assert decision.quest.approval_c is None


def test_a_research_only_quest_approved_at_a_parks_and_notifies():
    story, quest = drive(S.HYPOTHESISED, route="research_only")
    decision = _decide(story, quest, "A")
    assert decision.state is S.PARKED
    assert decision.quest.park_reason == "research_complete"
    assert keys(decision) == ["q1:1:notify_inbox:q1-e5:0"]
    assert payload(decision, "notify_inbox")["reason"] == "research_complete"
    assert "start_agent" not in types(decision)


# --- what invalidates a C approval --------------------------------------------------------------


def _landed_refused(story, quest, reason):
    assert_refused(decide(quest, story("landed", commit="f" * 40)), quest, reason)


def test_new_proof_invalidates_an_earlier_c_approval():
    story, quest = drive(S.PROVING)
    quest = quest.evolve({"approval_c": STALE})
    decision = decide(quest, story("proof_completed", **bundle_for(quest)))
    assert decision.state is S.READY
    assert decision.quest.approval_c is None


def test_a_new_signal_during_proof_invalidates_a_c_approval():
    story, quest = drive(S.PROVING)
    quest = quest.evolve({"approval_c": STALE})
    decision = decide(quest, story("signal_merged", signal=signal("s2")))
    assert decision.state is S.PROVING
    assert decision.quest.approval_c is None


def test_a_new_signal_after_proof_keeps_the_c_approval_and_the_quest_lands():
    story, quest = drive(S.LANDING)
    quest = accept(quest, story("signal_merged", signal=signal("s2"))).quest
    assert quest.approval_c == quest.proof_digest
    assert decide(quest, story("landed", commit="f" * 40)).state is S.WATCHING


def test_a_base_change_during_landing_invalidates_c_and_landing_is_refused():
    story, quest = drive(S.LANDING)
    assert quest.approval_c == quest.proof_digest
    quest = accept(quest, story("base_moved", base=NEW_BASE)).quest
    assert (quest.state, quest.approval_c) == (S.PATCHING, None)
    _landed_refused(story, quest, "only a landing quest can land; the quest is patching")


def test_a_base_change_while_a_landing_is_paused_sends_the_resumed_quest_to_patching():
    story, quest = drive(S.LANDING)
    quest = accept(quest, story("paused", actor=HOLDER)).quest
    quest = accept(quest, story("base_moved", base=NEW_BASE)).quest
    assert (quest.approval_c, quest.resume_state) == (None, S.PATCHING)
    decision = accept(quest, story("resumed", actor=HOLDER))
    assert decision.quest.state is S.PATCHING
    assert [e.type for e in decision.effects] == ["start_agent"]
    assert decision.effects[0].payload["step"] == "patch"
    _landed_refused(story, decision.quest, "only a landing quest can land; the quest is patching")


@pytest.mark.parametrize("held", [False, True], ids=["ready", "held at C"])
def test_a_base_change_at_ready_clears_the_proof_and_proves_again_on_the_new_base(held):
    story, quest = drive(S.READY)
    if held:
        quest = accept(quest, story("claimed", actor=HOLDER)).quest
    decision = accept(quest, story("base_moved", base=NEW_BASE))
    assert decision.quest.proof_digest is None
    assert decision.quest.state is (S.HANDED_OFF if held else S.PROVING)
    assert decision.quest.proof_pending is held
    (effect,) = decision.effects
    assert (effect.type, effect.payload["base"]) == ("run_proof", NEW_BASE)


@pytest.mark.parametrize("state", ACTIVE_STATES, ids=str)
def test_a_base_move_is_taken_in_every_active_state_and_clears_any_c_approval(state):
    story, quest = drive(state)
    decision = decide(quest, story("base_moved", base=NEW_BASE, actor=HOLDER))
    assert decision.outcome == "accepted"
    assert decision.quest.base == NEW_BASE
    assert decision.quest.approval_c is None
    moved_to = {S.LANDING: S.PATCHING, S.READY: S.PROVING}
    assert decision.state is moved_to.get(state, state)


def test_a_human_revision_with_the_same_head_in_landing_asks_for_c_again():
    story, quest = drive(S.LANDING)
    decision = decide(quest, story("human_revision", head=quest.patch_head, actor=HOLDER))
    assert decision.state is S.READY
    assert decision.revision == 1
    assert decision.quest.approval_c is None
    assert keys(decision) == [f"q1:1:request_checkpoint:q1-e{story.n}:0"]
    _landed_refused(story, decision.quest, "only a landing quest can land; the quest is ready")
    again = accept(decision.quest, _decide_event(story, "C")).quest
    assert decide(again, story("landed", commit="f" * 40)).state is S.WATCHING


def _decide_event(story, cp):
    return story("checkpoint_decided", checkpoint=cp, verdict="approve", actor=HOLDER)


@pytest.mark.parametrize("state", [S.PATCHING, S.PROVING, S.READY, S.LANDING], ids=str)
def test_a_human_revision_with_a_new_head_bumps_the_revision_and_asks_for_proof(state):
    if state is S.PATCHING:  # patching again after a failed proof: head and base are recorded
        story, quest = drive(S.PROVING)
        quest = accept(quest, story("proof_failed", reason="red")).quest
    else:
        story, quest = drive(state)
    decision = decide(quest, story("human_revision", head=NEW_HEAD, actor=HOLDER))
    assert decision.outcome == "accepted"
    assert decision.state is S.PROVING
    assert decision.revision == decision.quest.revision == quest.revision + 1 == 2
    assert decision.quest.patch_head == NEW_HEAD
    assert (decision.quest.approval_c, decision.quest.proof_digest) == (None, None)
    assert keys(decision) == [f"q1:2:run_proof:q1-e{story.n}:0"]
    assert payload(decision, "run_proof") == {"head": NEW_HEAD, "base": BASE, "revision": 2}
    if state is S.LANDING:
        reason = "only a landing quest can land; the quest is proving"
        _landed_refused(story, decision.quest, reason)


def test_proof_for_a_human_revision_must_bind_to_the_new_revision():
    story, landing = drive(S.LANDING)
    quest = accept(landing, story("human_revision", head=NEW_HEAD, actor=HOLDER)).quest
    stale = bundle_for(landing)  # revision 1, the old head
    reason = "proof bundle revision is 1 but the quest's is 2"
    assert_refused(decide(quest, story("proof_completed", **stale)), quest, reason)
    fresh = decide(quest, story("proof_completed", **bundle_for(quest)))
    assert (fresh.state, fresh.quest.approval_c) == (S.READY, None)


def test_a_human_revision_before_any_patch_is_refused():
    story, quest = drive(S.PATCHING)
    decision = decide(quest, story("human_revision", actor=HOLDER, head="c" * 40))
    assert decision.outcome == "refused"
    assert decision.reason == (
        "no patch is recorded yet: a person's first patch is a patch_recorded event"
    )
    assert decision.quest is quest
