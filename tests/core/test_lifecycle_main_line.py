"""The main line, one step at a time: sensed → … → closed, with the exact effect keys.

Spec: the seed's "The main line" and docs/lifecycle.md "The main line" and "Effects and their keys".
Event ids come from Story: e1 is the signal, e2 the triage, and so on along the line.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from ephyra.core.machine import decide, fold
from ephyra.core.rules import CheckpointMode
from ephyra.core.states import State
from tests.core.lifecycle_helpers import (
    LANDED,
    MAIN_LINE,
    assert_keys_parse,
    drive,
    keys,
    next_event,
    payload,
    policy_with,
)
from tests.core.story import BASE, HEAD, Story, bundle_for

S = State

# (state before, state after, exact effect keys). The event is the canonical next one.
STEPS = [
    (None, S.SENSED, ["q1:1:run_triage:q1-e1:0"]),
    (S.SENSED, S.TRIAGED, ["q1:1:start_agent:q1-e2:0"]),
    (S.TRIAGED, S.RESEARCHING, []),
    (S.RESEARCHING, S.HYPOTHESISED, ["q1:1:request_checkpoint:q1-e4:0"]),
    (S.HYPOTHESISED, S.REPRODUCING, ["q1:1:start_agent:q1-e5:0"]),
    (S.REPRODUCING, S.PLANNED, ["q1:1:request_checkpoint:q1-e6:0"]),
    (S.PLANNED, S.PATCHING, ["q1:1:start_agent:q1-e7:0"]),
    (S.PATCHING, S.PROVING, ["q1:1:run_proof:q1-e8:0"]),
    (S.PROVING, S.READY, ["q1:1:request_checkpoint:q1-e9:0"]),
    (S.READY, S.LANDING, ["q1:1:land:q1-e10:0"]),
    (
        S.LANDING,
        S.WATCHING,
        ["q1:1:start_watch:q1-e11:0", "q1:1:register_regression_probe:q1-e11:0"],
    ),
    (S.WATCHING, S.CLOSED, []),
]


def _step(before: State | None):
    if before is None:
        story, quest = Story("q1"), None
    else:
        story, quest = drive(before)
    return quest, decide(quest, next_event(story, quest))


def test_the_step_table_covers_the_whole_main_line():
    assert [after for _, after, _ in STEPS] == list(MAIN_LINE)
    assert [before for before, _, _ in STEPS[1:]] == list(MAIN_LINE[:-1])


@pytest.mark.parametrize(("before", "after", "expected"), STEPS, ids=[str(s[1]) for s in STEPS])
def test_each_main_line_step_reaches_its_state_with_exact_effect_keys(before, after, expected):
    quest, decision = _step(before)
    assert decision.outcome == "accepted"
    assert decision.reason is None
    assert decision.state_before == (None if quest is None else quest.state)
    assert decision.state is after
    assert decision.quest.state is after
    assert decision.revision == 1
    assert decision.quest.revision == 1
    assert keys(decision) == expected
    assert_keys_parse(decision)


def test_a_sensed_quest_asks_for_triage_of_its_fingerprint():
    _, decision = _step(None)
    assert payload(decision, "run_triage") == {"fingerprint": "fp1"}
    assert decision.quest.severity == decision.quest.severity_floor == "error"


def test_triage_records_the_route_and_risk_and_asks_an_agent_to_research():
    _, decision = _step(S.SENSED)
    assert payload(decision, "start_agent")["step"] == "research"
    assert (decision.quest.route, decision.quest.risk) == ("auto_fix", "medium")


@pytest.mark.parametrize(
    ("before", "checkpoint"),
    [(S.RESEARCHING, "A"), (S.REPRODUCING, "B"), (S.PROVING, "C")],
)
def test_reaching_a_checkpoint_requests_it_as_blocking_by_default(before, checkpoint):
    _, decision = _step(before)
    request = payload(decision, "request_checkpoint")
    assert request["checkpoint"] == checkpoint
    assert request["mode"] == "blocking"
    assert request["blocking"] is True


@pytest.mark.parametrize(
    ("mode", "blocking"),
    [
        (CheckpointMode.BLOCKING, True),
        (CheckpointMode.ADVISORY, False),
        (CheckpointMode.SHADOW, False),
    ],
)
def test_the_checkpoint_request_carries_the_policys_blocking_flag(mode, blocking):
    policy = policy_with(mode)
    story, quest = drive(S.RESEARCHING, policy=policy)
    decision = decide(quest, next_event(story, quest), policy)
    assert keys(decision) == ["q1:1:request_checkpoint:q1-e4:0"]
    assert payload(decision, "request_checkpoint") == {
        "checkpoint": "A",
        "mode": str(mode),
        "blocking": blocking,
    }


def test_the_hypothesis_is_recorded_when_written():
    _, decision = _step(S.RESEARCHING)
    assert decision.quest.hypothesis == "the cache key ignores the locale"


def test_approving_a_asks_an_agent_to_reproduce():
    _, decision = _step(S.HYPOTHESISED)
    assert payload(decision, "start_agent")["step"] == "reproduce"


def test_the_reproduction_and_plan_are_recorded_at_b():
    _, decision = _step(S.REPRODUCING)
    assert decision.quest.probe == "test_locale_cache"
    assert decision.quest.plan == "key by locale"


def test_a_reproduction_that_names_a_risk_replaces_the_triage_risk():
    story, quest = drive(S.REPRODUCING)
    event = story("reproduction_recorded", probe="p", plan="x", risk="high")
    assert decide(quest, event).quest.risk == "high"


def test_approving_b_asks_an_agent_to_patch():
    _, decision = _step(S.PLANNED)
    assert payload(decision, "start_agent")["step"] == "patch"


def test_a_recorded_patch_asks_for_proof_of_its_head_on_its_base():
    _, decision = _step(S.PATCHING)
    assert payload(decision, "run_proof") == {"head": HEAD, "base": BASE, "revision": 1}
    assert (decision.quest.patch_head, decision.quest.base) == (HEAD, BASE)


def test_completed_proof_records_the_canonical_digest_of_the_bundle():
    quest, decision = _step(S.PROVING)
    bundle = bundle_for(quest)["bundle"]
    text = json.dumps(bundle, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert decision.quest.proof_digest == "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_approving_c_lands_the_reviewed_head_with_the_proof_digest():
    quest, decision = _step(S.READY)
    assert payload(decision, "land") == {"head": HEAD, "base": BASE, "proof": quest.proof_digest}
    assert decision.quest.approval_c == quest.proof_digest


def test_landing_starts_the_watch_and_keeps_the_reproduction_as_a_probe():
    _, decision = _step(S.LANDING)
    assert payload(decision, "start_watch") == {"commit": LANDED, "minutes": 30}
    assert payload(decision, "register_regression_probe")["probe"] == "test_locale_cache"
    assert decision.quest.landed_commit == LANDED


def test_a_clean_watch_closes_the_quest_for_good():
    _, decision = _step(S.WATCHING)
    assert decision.quest.state is S.CLOSED


def test_a_human_routed_quest_is_started_by_a_person_who_gives_the_route():
    story, quest = drive(S.TRIAGED, route="human")
    decision = decide(quest, story("research_started", route="auto_fix", actor="ann"))
    assert decision.state is S.RESEARCHING
    assert decision.quest.route == "auto_fix"
    assert keys(decision) == ["q1:1:start_agent:q1-e3:0"]
    assert payload(decision, "start_agent")["step"] == "research"


def test_folding_the_main_line_replays_the_same_decisions_and_keys():
    story, events, quest = Story("q1"), [], None
    for _ in MAIN_LINE:
        event = next_event(story, quest)
        events.append(event)
        quest = decide(quest, event).quest
    first, second = fold(events), fold(events)
    assert first.first_invalid is None
    assert first.quest.state is S.CLOSED
    assert [d.to_dict() for d in first.decisions] == [d.to_dict() for d in second.decisions]
    assert [k for _, _, expected in STEPS for k in expected] == [
        k for d in first.decisions for k in keys(d)
    ]
