"""Claimed reviews, proof binding and effect keys.

Spec: the seed's "Claimed reviews", "Proof completion" and "Effects"; docs/lifecycle.md
"claimed", "released", "Claims", "Proof binding" and "Effects and their keys".
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest
from pydantic import ValidationError

from ephyra.core.effects import EffectType, parse_effect_key
from ephyra.core.events import event_to_dict, parse_event
from ephyra.core.machine import decide
from ephyra.core.proof import CheckResult
from ephyra.core.rules import CheckpointMode, MachinePolicy
from ephyra.core.states import State
from tests.core.lifecycle_helpers import (
    ACTIVE_STATES,
    HOLDER,
    LANDED,
    NEW_BASE,
    NEW_HEAD,
    OTHER,
    accept,
    assert_keys_parse,
    assert_refused,
    drive,
    keys,
    next_event,
    passed,
    payload,
    policy_with,
    proof_with,
)
from tests.core.story import BASE, HEAD, Story, bundle_for

S = State
MODEL = "judgement-jev/jev-1.14"
HELD = f"the review is claimed by {HOLDER}; only they can act now"


# --- claims -----------------------------------------------------------------------------------


@pytest.mark.parametrize("claimant", [OTHER, HOLDER])
def test_a_second_claim_is_refused_naming_the_holder(claimant):
    story, quest = drive(S.HANDED_OFF, at=S.PLANNED)
    reason = f"the review is already claimed by {HOLDER}"
    assert_refused(decide(quest, story("claimed", actor=claimant)), quest, reason)


@pytest.mark.parametrize(
    "state",
    [
        S.SENSED,
        S.RESEARCHING,
        S.REPRODUCING,
        S.PATCHING,
        S.PROVING,
        S.LANDING,
        S.WATCHING,
        S.ROLLED_BACK,
        S.PARKED,
    ],
    ids=str,
)
def test_a_review_can_be_claimed_only_at_a_checkpoint(state):
    story, quest = drive(state)
    reason = f"a review can be claimed only at a checkpoint; the quest is {state}"
    assert_refused(decide(quest, story("claimed", actor=HOLDER)), quest, reason)


CHECKPOINT_OF = {S.HYPOTHESISED: "A", S.PLANNED: "B", S.READY: "C"}
ACTIONS_BY_OTHERS = [
    ("checkpoint_decided", {"verdict": "approve"}),
    ("checkpoint_decided", {"verdict": "reject"}),
    ("paused", {}),
    ("killed", {}),
    ("released", {}),
]


@pytest.mark.parametrize("at", list(CHECKPOINT_OF), ids=str)
@pytest.mark.parametrize(("type_", "fields"), ACTIONS_BY_OTHERS, ids=lambda v: str(v))
def test_a_claimed_review_refuses_actions_from_anyone_else(at, type_, fields):
    story, quest = drive(S.HANDED_OFF, at=at)
    if type_ == "checkpoint_decided":
        fields = {**fields, "checkpoint": CHECKPOINT_OF[at]}
    assert_refused(decide(quest, story(type_, actor=OTHER, **fields)), quest, HELD)


def test_a_claimed_review_refuses_human_revisions_from_anyone_else():
    story, quest = drive(S.HANDED_OFF, at=S.READY)
    assert_refused(decide(quest, story("human_revision", head=NEW_HEAD, actor=OTHER)), quest, HELD)


def test_a_claimed_review_refuses_an_automatic_decision():
    policy = policy_with(CheckpointMode.ADVISORY, thresholds={MODEL: 0.5})
    story, quest = drive(S.HANDED_OFF, at=S.HYPOTHESISED, policy=policy)
    automatic = {
        "evaluation": "ev1",
        "model": MODEL,
        "confidence": 0.9,
        "checks": [{"name": "cites_evidence", "passed": True}],
    }
    event = story(
        "checkpoint_decided", checkpoint="A", verdict="approve", actor=MODEL, automatic=automatic
    )
    assert_refused(decide(quest, event, policy), quest, HELD)


@pytest.mark.parametrize("author", [OTHER, HOLDER, "ephyra"])
def test_a_claimed_review_still_takes_comments_from_anyone(author):
    story, quest = drive(S.HANDED_OFF, at=S.PLANNED)
    decision = decide(
        quest, story("comment_added", body="lgtm?", reply_requested=True, actor=author)
    )
    assert decision.outcome == "accepted"
    assert decision.state is S.HANDED_OFF
    assert decision.quest.claim == HOLDER
    assert decision.quest.comments == quest.comments + 1
    assert keys(decision) == [f"q1:1:reply_comment:q1-e{story.n}:0"]
    assert payload(decision, "reply_comment") == {"to": f"q1-e{story.n}"}


@pytest.mark.parametrize("state", ACTIVE_STATES, ids=str)
def test_a_comment_is_taken_in_every_active_state(state):
    story, quest = drive(state)
    decision = decide(quest, story("comment_added", body="any news?", actor=OTHER))
    assert decision.outcome == "accepted"
    assert decision.state is state
    assert decision.effects == ()
    assert decision.quest.comments == quest.comments + 1


def test_the_holder_cannot_revise_the_patch_at_a_or_b():
    story, quest = drive(S.HANDED_OFF, at=S.PLANNED)
    reason = "a human revision applies to a patch; the quest is handed_off"
    event = story("human_revision", head=NEW_HEAD, actor=HOLDER)
    assert_refused(decide(quest, event), quest, reason)


def test_the_holders_decision_advances_and_clears_the_claim():
    story, quest = drive(S.HANDED_OFF, at=S.PLANNED)
    event = story("checkpoint_decided", checkpoint="B", verdict="approve", actor=HOLDER)
    decision = decide(quest, event)
    assert decision.state is S.PATCHING
    assert decision.quest.claim is None
    assert decision.quest.decisions[-1].actor == HOLDER


# Until actors are user accounts, an actor is free text: "ann ", " ann" and "ann" (and "ann" in
# full-width letters, by NFKC) are one person, and a blank name is no one.
SPELLINGS_OF_HOLDER = [f"{HOLDER} ", f" {HOLDER}", f"\u00a0{HOLDER}\n", "\uff41\uff4e\uff4e"]


@pytest.mark.parametrize("spelling", SPELLINGS_OF_HOLDER)
def test_the_holder_is_the_same_person_whatever_surrounds_or_styles_their_name(spelling):
    assert HOLDER == "ann"  # the full-width spelling above is of this name
    story, quest = drive(S.HANDED_OFF, at=S.PLANNED)
    event = story("checkpoint_decided", checkpoint="B", verdict="approve", actor=spelling)
    decision = decide(quest, event)
    assert decision.outcome == "accepted", decision.reason
    assert decision.state is S.PATCHING
    assert decision.quest.decisions[-1].actor == HOLDER


@pytest.mark.parametrize("spelling", SPELLINGS_OF_HOLDER)
def test_a_claim_is_held_under_the_normalised_name(spelling):
    story, quest = drive(S.PLANNED)
    held = accept(quest, story("claimed", actor=spelling)).quest
    assert held.claim == HOLDER
    reason = f"the review is already claimed by {HOLDER}"
    assert_refused(decide(held, story("claimed", actor=HOLDER)), held, reason)


@pytest.mark.parametrize("blank", ["", "   ", "\u3000", "\t\n", "\u00a0"])
def test_an_event_with_a_blank_actor_is_refused(blank):
    with pytest.raises(ValidationError) as refused:
        parse_event(
            {"id": "e1", "quest": "q1", "at": "2026-01-05T09:00:00Z", "type": "claimed"}
            | {"actor": blank}
        )
    (error,) = refused.value.errors()
    assert error["loc"] == ("claimed", "actor")
    assert "the actor's name is blank" in error["msg"]


DEFAULT = MachinePolicy()


def _held_revision(policy=DEFAULT):
    """Ann holds the review at C and pushes a new head: proof runs under her claim."""
    story, quest = drive(S.HANDED_OFF, at=S.READY, policy=policy)
    decision = decide(quest, story("human_revision", head=NEW_HEAD, actor=HOLDER), policy)
    assert decision.state is S.HANDED_OFF
    assert decision.revision == 2
    assert keys(decision) == [f"q1:2:run_proof:q1-e{story.n}:0"]
    return story, decision.quest


def test_proof_that_succeeds_during_a_claim_keeps_the_review_held_at_c():
    story, quest = _held_revision()
    decision = decide(quest, story("proof_completed", **bundle_for(quest)))
    assert decision.outcome == "accepted"
    held = decision.quest
    assert (held.state, held.resume_state, held.claim) == (S.HANDED_OFF, S.READY, HOLDER)
    assert held.proof_digest is not None
    assert held.approval_c is None
    assert keys(decision) == [f"q1:2:request_checkpoint:q1-e{story.n}:0"]
    approve = story("checkpoint_decided", checkpoint="C", verdict="approve", actor=HOLDER)
    assert decide(held, approve).state is S.LANDING


def test_proof_that_fails_during_a_claim_clears_it_before_patching_again():
    story, quest = _held_revision()
    decision = decide(quest, story("proof_failed", reason="red"))
    assert decision.state is S.PATCHING
    assert decision.quest.claim is None
    assert decision.quest.resume_state is None


def test_proof_that_fails_for_the_last_time_during_a_claim_clears_it_before_parking():
    policy = MachinePolicy(proof_attempts=1)
    story, quest = _held_revision(policy)
    decision = decide(quest, story("proof_failed", reason="red"), policy)
    assert decision.state is S.PARKED
    assert decision.quest.park_reason == "proof_attempts_exhausted"
    assert decision.quest.claim is None


def _paused_held_revision():
    """Ann pauses while the proof of her revision is still running, then resumes."""
    story, quest = _held_revision()
    quest = accept(quest, story("paused", actor=HOLDER)).quest
    return story, accept(quest, story("resumed", actor=HOLDER))


def test_pausing_while_proof_runs_under_a_claim_resumes_the_proof():
    # seed: resumed goes back to the state it was in, and `ready` means "proof is complete";
    # the quest was proving revision 2 (proof_pending), so it must not come back at C unproven.
    story, resumed = _paused_held_revision()
    assert resumed.state is S.PROVING
    assert keys(resumed) == [f"q1:2:run_proof:q1-e{story.n}:0"]
    assert payload(resumed, "run_proof") == {"head": NEW_HEAD, "base": BASE, "revision": 2}


def _approved_at_c(path: str):
    """The quest at C, approved, along one of the paths that lead there; returns the proven
    quest and the approval's decision."""
    if path == "main line":
        story, quest = drive(S.READY)
    elif path == "held revision":
        story, quest = _held_revision()
        quest = accept(quest, story("proof_completed", **bundle_for(quest))).quest
    else:  # paused while the held revision's proof ran, resumed, then proven
        story, resumed = _paused_held_revision()
        quest = accept(resumed.quest, story("proof_completed", **bundle_for(resumed.quest))).quest
        quest = accept(quest, story("claimed", actor=HOLDER)).quest
    approve = story("checkpoint_decided", checkpoint="C", verdict="approve", actor=HOLDER)
    return quest, decide(quest, approve)


@pytest.mark.parametrize("path", ["main line", "held revision", "paused held revision"])
def test_a_land_write_is_never_asked_for_without_a_proof_digest(path):
    # seed/docs: `land` is the reviewed head landed on base *with the proof digest*. (The test
    # once approved while the proof still ran: no land was asked for, and nothing was checked.)
    proven, decision = _approved_at_c(path)
    assert decision.state is S.LANDING, decision.reason
    (land,) = [effect for effect in decision.effects if effect.type is EffectType.LAND]
    assert proven.proof_digest is not None
    assert land.payload["proof"] == proven.proof_digest
    assert land.payload["head"] == proven.patch_head


def test_approving_c_while_the_proof_still_runs_asks_for_no_land():
    story, resumed = _paused_held_revision()
    assert resumed.state is S.PROVING and resumed.quest.proof_digest is None
    approve = story("checkpoint_decided", checkpoint="C", verdict="approve", actor=HOLDER)
    decision = decide(resumed.quest, approve)
    assert decision.outcome == "refused"
    assert decision.effects == ()


# --- proof binding ----------------------------------------------------------------------------


def _complete(story, quest, policy=DEFAULT, **proof):
    return decide(quest, story("proof_completed", **proof), policy)


def test_proof_cannot_complete_without_a_recorded_patch_head():
    story, quest = drive(S.PROVING)
    quest = quest.evolve({"patch_head": None})
    decision = _complete(story, quest, **bundle_for(quest, head=HEAD))
    assert_refused(decision, quest, "proof cannot complete: no patch head is recorded")


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("quest", "q2", "proof bundle quest is 'q2' but the quest's is 'q1'"),
        ("revision", 2, "proof bundle revision is 2 but the quest's is 1"),
        ("risk", "high", "proof bundle risk is 'high' but the quest's is 'medium'"),
        ("base", NEW_BASE, f"proof bundle base is '{NEW_BASE}' but the quest's is '{BASE}'"),
        ("head", NEW_HEAD, f"proof bundle head is '{NEW_HEAD}' but the quest's is '{HEAD}'"),
    ],
)
def test_proof_is_refused_when_a_bound_field_differs(field, value, reason):
    story, quest = drive(S.PROVING)
    assert_refused(_complete(story, quest, **proof_with(quest, {field: value})), quest, reason)


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.mark.parametrize(
    "serialise",
    [
        lambda b: json.dumps(b),  # default separators
        lambda b: json.dumps(b, separators=(",", ":")),  # keys not sorted
        lambda b: json.dumps(b, sort_keys=True, indent=2),
        lambda b: json.dumps({**b, "revision": 2}, sort_keys=True, separators=(",", ":")),
    ],
    ids=["spaces", "unsorted", "indented", "another-bundle"],
)
def test_proof_is_refused_when_the_digest_is_not_the_canonical_sha256(serialise):
    story, quest = drive(S.PROVING)
    proof = bundle_for(quest)
    proof["digest"] = _digest(serialise(proof["bundle"]))
    reason = "proof digest does not match the canonical SHA-256 of the bundle"
    assert_refused(_complete(story, quest, **proof), quest, reason)


def test_proof_binds_with_the_documented_canonical_digest():
    story, quest = drive(S.PROVING)
    proof = bundle_for(quest, checks=passed("tests"))
    canonical = json.dumps(
        proof["bundle"], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    proof["digest"] = _digest(canonical)
    decision = _complete(story, quest, **proof)
    assert decision.outcome == "accepted"
    assert decision.state is S.READY
    assert decision.quest.proof_digest == proof["digest"]


# docs/lifecycle.md "Proof binding": the recipe anyone can run on the bundle they submit.
JQ_RECIPE = "jq -cS . bundle.json | tr -d '\\n' | sha256sum"


def _hashed_with_the_documented_recipe(tmp_path, bundle: dict) -> str:
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed (apt-get install jq; .ci/run installs it)")
    (tmp_path / "bundle.json").write_text(json.dumps(bundle, indent=2))
    done = subprocess.run(
        ["sh", "-c", JQ_RECIPE], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    return "sha256:" + done.stdout.split()[0]


@pytest.mark.parametrize(
    "checks",
    [
        [{"name": "tests", "passed": True}],  # command, exit_code, duration_ms… left out
        [{"name": "tests", "passed": True, "exit_code": 0, "duration_ms": 4210}],
        None,  # no checks field at all
    ],
    ids=["required-fields-only", "some-optional-fields", "no-checks-field"],
)
def test_a_bundle_hashed_with_the_documented_jq_recipe_binds_as_submitted(tmp_path, checks):
    story, quest = drive(S.PROVING)
    bundle = {"quest": "q1", "revision": 1, "risk": "medium", "base": BASE, "head": HEAD}
    if checks is not None:
        bundle["checks"] = checks
    digest = _hashed_with_the_documented_recipe(tmp_path, bundle)
    decision = _complete(story, quest, bundle=bundle, digest=digest)
    assert decision.outcome == "accepted", decision.reason
    assert decision.quest.proof_digest == digest


def test_a_submitted_bundle_keeps_its_form_through_the_events_json(tmp_path):
    # The journal stores event.json and replays it: the bundle must come back as it was sent,
    # or the replayed digest would differ from the one that was accepted.
    story, _ = drive(S.PROVING)
    bundle = {"quest": "q1", "revision": 1, "risk": "medium", "base": BASE, "head": HEAD}
    bundle["checks"] = [{"name": "tests", "passed": True}]
    digest = _hashed_with_the_documented_recipe(tmp_path, bundle)
    event = story("proof_completed", bundle=bundle, digest=digest)
    assert event_to_dict(event)["bundle"] == bundle
    assert parse_event(event_to_dict(event)).bundle.digest() == digest


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"revision": "1"}, "revision"),
        ({"revision": 1.0}, "revision"),
        ({"checks": [{"name": "tests", "passed": "yes"}]}, "checks.0.passed"),
        (
            {"checks": [{"name": "tests", "passed": True, "duration_ms": 12.0}]},
            "checks.0.duration_ms",
        ),
    ],
    ids=["revision-as-text", "revision-as-float", "passed-as-text", "duration-as-float"],
)
def test_a_bundle_value_that_would_change_when_converted_is_refused(change, where):
    # Converted, "1" would hash as 1: the digest of what was submitted could never match.
    bundle = {"quest": "q1", "revision": 1, "risk": "medium", "base": BASE, "head": HEAD} | change
    with pytest.raises(ValidationError) as refused:
        parse_event(
            {"id": "e1", "quest": "q1", "at": "2026-01-05T09:00:00Z", "type": "proof_completed"}
            | {"bundle": bundle, "digest": "sha256:" + "0" * 64}
        )
    (error,) = refused.value.errors()
    assert ".".join(map(str, error["loc"])) == f"proof_completed.bundle.{where}"


REQUIRE_TESTS = MachinePolicy(required_checks={"low": ("tests",)})


@pytest.mark.parametrize(
    ("checks", "reason"),
    [
        ((), "proof bundle lacks the required check 'tests'"),
        (passed("lint"), "proof bundle lacks the required check 'tests'"),
        (
            (CheckResult(name="tests", passed=False, exit_code=1),),
            "required check 'tests' failed: report proof_failed instead",
        ),
    ],
    ids=["none", "other-only", "failed"],
)
def test_proof_is_refused_when_a_required_check_is_missing_or_failed(checks, reason):
    story, quest = drive(S.PROVING, policy=REQUIRE_TESTS, risk="low")
    decision = _complete(story, quest, REQUIRE_TESTS, **bundle_for(quest, checks=checks))
    assert_refused(decision, quest, reason)


def test_proof_is_accepted_when_every_required_check_passed():
    story, quest = drive(S.PROVING, policy=REQUIRE_TESTS, risk="low")
    proof = bundle_for(quest, checks=passed("lint", "tests"))
    decision = _complete(story, quest, REQUIRE_TESTS, **proof)
    assert decision.state is S.READY
    assert keys(decision) == [f"q1:1:request_checkpoint:q1-e{story.n}:0"]


def test_the_proof_matrix_applies_to_the_quests_own_risk_only():
    story, quest = drive(S.PROVING, policy=REQUIRE_TESTS, risk="medium")
    assert _complete(story, quest, REQUIRE_TESTS, **bundle_for(quest)).state is S.READY


# --- effect keys -------------------------------------------------------------------------------


def test_effects_of_different_types_in_one_transition_each_have_occurrence_zero():
    story, quest = drive(S.LANDING)
    decision = decide(quest, next_event(story, quest))
    parsed = [parse_effect_key(k) for k in keys(decision)]
    assert [p.type for p in parsed] == [
        EffectType.START_WATCH,
        EffectType.REGISTER_REGRESSION_PROBE,
    ]
    assert [p.occurrence for p in parsed] == [0, 0]
    assert {(p.trail, p.revision, p.event) for p in parsed} == {("q1", 1, "q1-e11")}
    assert [str(p) for p in parsed] == keys(decision)
    assert_keys_parse(decision)


def test_the_payload_is_not_part_of_the_key():
    story, quest = drive(S.LANDING)
    one = next_event(story, quest)
    other = parse_event({**one.model_dump(mode="json"), "commit": "f" * 40})
    first, second = decide(quest, one), decide(quest, other)
    assert keys(first) == keys(second)
    assert payload(first, "start_watch")["commit"] == LANDED
    assert payload(second, "start_watch")["commit"] == "f" * 40


def test_an_effect_key_carries_the_revision_after_the_transition():
    story, quest = drive(S.ROLLED_BACK)
    decision = decide(quest, story("rollback_confirmed"))
    assert parse_effect_key(keys(decision)[0]).revision == quest.revision + 1


@pytest.mark.parametrize("ident", ["q:1", "q 1", ""])
def test_identifiers_that_would_break_a_key_are_rejected(ident):
    with pytest.raises(ValidationError):
        Story(ident).signal()


@pytest.mark.parametrize("key", ["q1:1:land:e1", "q1:x:land:e1:0", "q1:1:fly:e1:0"])
def test_a_malformed_effect_key_does_not_parse(key):
    with pytest.raises(ValueError):
        parse_effect_key(key)


def test_replaying_a_transition_gives_the_same_keys():
    story, quest = drive(S.PATCHING)
    event = next_event(story, quest)
    assert keys(decide(quest, event)) == keys(decide(quest, event)) == ["q1:1:run_proof:q1-e8:0"]
    assert accept(quest, event).quest == decide(quest, event).quest
