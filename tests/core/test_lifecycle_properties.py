"""Randomised replay: whatever the event sequence, the machine is deterministic and its
invariants hold (terminal states absorb, keys never repeat, revisions never go down, a refused
event changes nothing)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ephyra.core.effects import parse_effect_key
from ephyra.core.machine import ABSORBED, ACCEPTED, REFUSED, decide, fold
from ephyra.core.rules import CheckpointMode, CheckpointRule, MachinePolicy, WatchStart
from ephyra.core.states import TERMINAL, Checkpoint, State
from tests.core.story import BASE, HEAD, Story, bundle_for

HEADS = [HEAD, "c" * 40, "d" * 40]
MODEL = "judgement-jev/jev-1.14"

POLICIES = [
    MachinePolicy(proof_attempts=2),
    MachinePolicy(watch_from=WatchStart.DEPLOYMENT, required_checks={"low": ("tests",)}),
    MachinePolicy(
        checkpoints={
            Checkpoint.A: CheckpointRule(CheckpointMode.ADVISORY, {MODEL: 0.8}),
            Checkpoint.B: CheckpointRule(CheckpointMode.SHADOW),
            Checkpoint.C: CheckpointRule(CheckpointMode.BLOCKING),
        },
        required_checks={"low": ("tests",)},
    ),
]

ACTORS = ["ann", "bob", "ephyra"]


def _open_checkpoint(quest) -> str:
    state = quest.resume_state if quest.state is State.HANDED_OFF else quest.state
    return {State.HYPOTHESISED: "A", State.PLANNED: "B"}.get(state, "C")


def _event(kind: str, story: Story, quest, draw):
    """Build one event of ``kind``; some choices are deliberately wrong for the state."""
    actor = draw(st.sampled_from(ACTORS))
    if kind == "signal":
        return story.signal()
    if kind == "triage":
        route = draw(st.sampled_from(["auto_fix"] * 4 + ["research_only", "human", "ignore"]))
        return story("triage_decided", route=route, risk=draw(st.sampled_from(["low", "high"])))
    if kind == "research":
        route = draw(st.sampled_from([None, "auto_fix", "research_only"]))
        return story("research_started", actor=actor, route=route)
    if kind == "decide":
        if quest is not None and quest.claim and draw(st.booleans()):
            actor = quest.claim
        automatic = None
        if draw(st.booleans()):
            automatic = {
                "evaluation": "ev1",
                "model": draw(st.sampled_from([MODEL, "other/model-2"])),
                "confidence": draw(st.sampled_from([0.5, 0.9])),
                "checks": [{"name": "cites-frames", "passed": draw(st.booleans())}],
            }
        return story(
            "checkpoint_decided",
            actor=actor,
            checkpoint=draw(st.sampled_from([_open_checkpoint(quest), "A", "B", "C"])),
            verdict=draw(st.sampled_from(["approve"] * 8 + ["revise", "reject"])),
            automatic=automatic,
        )
    if kind == "patch":
        return story("patch_recorded", head=draw(st.sampled_from(HEADS)), base=BASE)
    if kind == "proof":
        if quest is not None and quest.patch_head and quest.risk and quest.base:
            passed = draw(st.integers(0, 3)) > 0
            checks = ({"name": "tests", "passed": passed},) if draw(st.integers(0, 3)) else ()
            override = {}
            if draw(st.integers(0, 4)) == 0:
                override = {"revision": quest.revision + 1}
            return story("proof_completed", **bundle_for(quest, checks=checks, **override))
        return story("proof_failed", reason="no patch")
    if kind == "base":
        return story("base_moved", base=draw(st.sampled_from([BASE, "e" * 40])))
    if kind == "deployed":
        landed = (quest.landed_commit if quest is not None else None) or "f" * 40
        includes = draw(st.sampled_from([landed, landed, "e" * 40]))
        return story(
            "deployment_observed", commit="9" * 40, includes=includes, environment="production"
        )
    if kind == "checks":
        head = (quest.patch_head if quest is not None else None) or HEAD
        checks = [
            {"name": draw(st.sampled_from(["tests", "lint"])), "passed": draw(st.booleans())}
            for _ in range(draw(st.integers(1, 3)))
        ]
        head = draw(st.sampled_from([head, head, "c" * 40]))
        return story("checks_reported", head=head, checks=checks)
    if kind == "revision":
        return story("human_revision", actor=actor, head=draw(st.sampled_from(HEADS)))
    if kind in {"claimed", "released", "resumed"}:
        return story(kind, actor=actor)
    if kind == "paused":
        return story("paused", actor=actor, reason="random")
    if kind == "killed":
        return story("killed", actor=actor, reason="random")
    if kind == "comment":
        return story("comment_added", actor=actor, body="hm", reply_requested=draw(st.booleans()))
    if kind == "merge":
        return story(
            "signal_merged", signal={"id": "s2", "fingerprint": "fp1", "severity": "fatal"}
        )
    if kind == "reopen":
        return story("regression_reopened", signal={"id": "s3", "fingerprint": "fp1"})
    if kind == "usage":
        return story("usage_recorded", source="agent", cost_micros=10, tokens=5)
    simple = {
        "hypothesis": ("hypothesis_written", {"summary": "h"}),
        "reproduced": ("reproduction_recorded", {"probe": "pytest"}),
        "unreproducible": ("reproduction_failed", {}),
        "proof_failed": ("proof_failed", {}),
        "landed": ("landed", {"commit": "f" * 40}),
        "clean": ("watch_clean", {}),
        "regression": ("regression_observed", {}),
        "rollback": ("rollback_confirmed", {}),
        "probes": ("probes_requested", {"probes": ["p1"]}),
    }
    type_, fields = simple[kind]
    return story(type_, **fields)


KINDS = [
    "triage",
    "research",
    "hypothesis",
    "decide",
    "reproduced",
    "unreproducible",
    "patch",
    "proof",
    "proof_failed",
    "landed",
    "clean",
    "regression",
    "rollback",
    "base",
    "revision",
    "claimed",
    "released",
    "paused",
    "resumed",
    "killed",
    "comment",
    "merge",
    "reopen",
    "usage",
    "probes",
    "signal",
    "deployed",
    "checks",
]
# What usually comes next in each state: biasing the walk this way takes it deep into the
# machine, while the uniform draws keep throwing events at states that must refuse them.
LIKELY = {
    State.SENSED: ["triage"],
    State.TRIAGED: ["research"],
    State.RESEARCHING: ["hypothesis", "paused", "merge"],
    State.HYPOTHESISED: ["decide", "claimed"],
    State.REPRODUCING: ["reproduced", "reproduced", "unreproducible", "probes"],
    State.PLANNED: ["decide", "claimed"],
    State.PATCHING: ["patch"],
    State.PROVING: ["proof", "proof", "proof_failed", "merge", "revision", "checks"],
    State.READY: ["decide", "decide", "claimed", "revision", "base", "checks"],
    State.LANDING: ["landed", "landed", "base", "revision", "checks"],
    State.WATCHING: ["clean", "regression", "probes", "deployed", "deployed"],
    State.CLOSED: ["reopen", "usage"],
    State.ROLLED_BACK: ["rollback"],
    State.PARKED: ["resumed"],
    State.HANDED_OFF: ["decide", "released", "revision", "proof", "comment"],
    State.ABANDONED: ["usage", "comment"],
}


@st.composite
def histories(draw):
    story = Story()
    policy = draw(st.sampled_from(POLICIES))
    events = [story.signal()]
    quest = decide(None, events[0], policy).quest
    for _ in range(draw(st.integers(1, 60))):
        kind = (
            draw(st.sampled_from(LIKELY[quest.state]))
            if draw(st.integers(0, 5))
            else (draw(st.sampled_from(KINDS)))
        )
        event = _event(kind, story, quest, draw)
        events.append(event)
        decision = decide(quest, event, policy)
        if decision.outcome == ACCEPTED:
            quest = decision.quest
    return events, policy


@given(histories())
def test_replaying_the_same_events_gives_identical_decisions_and_keys(history):
    events, policy = history
    first, second = fold(events, policy), fold(events, policy)
    assert [d.to_dict() for d in first.decisions] == [d.to_dict() for d in second.decisions]
    assert first.quest == second.quest
    assert first.quest.to_dict() == second.quest.to_dict()


@given(histories())
def test_invariants_hold_over_any_history(history):
    events, policy = history
    quest = None
    keys: set[str] = set()
    for event in events:
        before = None if quest is None else quest.to_dict()
        decision = decide(quest, event, policy)
        if quest is not None:
            assert quest.to_dict() == before, "decide must not mutate its input"
        if decision.outcome in {REFUSED, ABSORBED}:
            assert decision.quest is quest
            assert decision.effects == ()
            assert decision.reason
            continue
        new = decision.quest
        if quest is not None:
            assert new.revision >= quest.revision
            if quest.state in TERMINAL:
                allowed = {"usage_recorded"} | (
                    {"regression_reopened"} if quest.state is State.CLOSED else set()
                )
                assert event.type in allowed
                if event.type == "usage_recorded":
                    assert new.state is quest.state
        for effect in decision.effects:
            assert effect.key not in keys, f"effect key repeated: {effect.key}"
            keys.add(effect.key)
            parsed = parse_effect_key(effect.key)
            assert (parsed.trail, parsed.revision, parsed.event) == (new.id, new.revision, event.id)
        if new.state is State.HANDED_OFF:
            assert new.claim is not None and new.resume_state is not None
        if new.state is State.PARKED:
            assert new.resume_state is not None and new.park_reason
        quest = new


@given(histories())
def test_the_first_invalid_transition_is_the_first_refusal(history):
    events, policy = history
    result = fold(events, policy)
    refused = [d for d in result.decisions if d.outcome == REFUSED]
    assert result.first_invalid == (refused[0] if refused else None)
