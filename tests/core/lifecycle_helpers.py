"""Helpers for the lifecycle tests: drive a quest along the main line, apply events, check
refusals. Everything runs through ``ephyra.core.machine.decide``; nothing touches a database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ephyra.core.effects import parse_effect_key
from ephyra.core.machine import Decision, decide
from ephyra.core.proof import CheckResult, ProofBundle
from ephyra.core.quest import Quest
from ephyra.core.rules import DEFAULT_POLICY, CheckpointMode, CheckpointRule, MachinePolicy
from ephyra.core.states import Checkpoint, State
from tests.core.story import BASE, HEAD, Story, bundle_for

S = State
LANDED = "c" * 40
NEW_BASE = "d" * 40
NEW_HEAD = "e" * 40
DEPLOYED = "f" * 40  # a later commit of the base branch, whose history holds LANDED
HOLDER = "ann"
OTHER = "bob"

# The main line, in order; each state is left by the event NEXT builds for it.
MAIN_LINE = (
    S.SENSED,
    S.TRIAGED,
    S.RESEARCHING,
    S.HYPOTHESISED,
    S.REPRODUCING,
    S.PLANNED,
    S.PATCHING,
    S.PROVING,
    S.READY,
    S.LANDING,
    S.WATCHING,
    S.CLOSED,
)
CHECKPOINT_AT = {S.HYPOTHESISED: "A", S.PLANNED: "B", S.READY: "C"}
# Every state that is neither closed nor abandoned.
ACTIVE_STATES = (*MAIN_LINE[:-1], S.ROLLED_BACK, S.PARKED, S.HANDED_OFF)


def policy_with(
    mode: CheckpointMode,
    *,
    thresholds: dict[str, float] | None = None,
    only: str | None = None,
    **kw: Any,
) -> MachinePolicy:
    """A policy whose checkpoints (all three, or ``only`` one) have ``mode`` and thresholds;
    the others stay blocking."""
    rule = CheckpointRule(mode=mode, thresholds=dict(thresholds or {}))
    chosen = [cp for cp in Checkpoint if only is None or cp == only]
    return MachinePolicy(checkpoints={cp: rule for cp in chosen}, **kw)


def passed(*names: str) -> tuple[CheckResult, ...]:
    return tuple(CheckResult(name=n, passed=True) for n in names)


def next_event(
    story: Story,
    quest: Quest | None,
    *,
    route: str = "auto_fix",
    risk: str = "medium",
    checks: tuple[CheckResult, ...] = (),
):
    """The canonical event that moves ``quest`` one step along the main line."""
    if quest is None:
        return story.signal()
    state = quest.state
    if state is S.SENSED:
        return story("triage_decided", route=route, risk=risk, rule="r1")
    if state is S.TRIAGED:
        route = {"route": "auto_fix"} if quest.route == "human" else {}
        return story("research_started", actor=HOLDER, **route)
    if state is S.RESEARCHING:
        return story("hypothesis_written", summary="the cache key ignores the locale")
    if state in CHECKPOINT_AT and state is not S.READY:
        return story(
            "checkpoint_decided", checkpoint=CHECKPOINT_AT[state], verdict="approve", actor=HOLDER
        )
    if state is S.REPRODUCING:
        return story("reproduction_recorded", probe="test_locale_cache", plan="key by locale")
    if state is S.PATCHING:
        return story("patch_recorded", head=HEAD, base=BASE)
    if state is S.PROVING:
        return story("proof_completed", **bundle_for(quest, checks=checks))
    if state is S.READY:
        return story("checkpoint_decided", checkpoint="C", verdict="approve", actor=HOLDER)
    if state is S.LANDING:
        return story("landed", commit=LANDED)
    if state is S.WATCHING:
        return story("watch_clean", summary="quiet for 30 minutes")
    raise ValueError(f"{state} is not on the main line")


def accept(quest: Quest | None, event, policy: MachinePolicy = DEFAULT_POLICY) -> Decision:
    decision = decide(quest, event, policy)
    assert decision.outcome == "accepted", (event.type, decision.reason)
    return decision


def drive(
    target: State,
    quest_id: str = "q1",
    *,
    policy: MachinePolicy = DEFAULT_POLICY,
    route: str = "auto_fix",
    risk: str = "medium",
    checks: tuple[CheckResult, ...] = (),
    at: State = S.HYPOTHESISED,
) -> tuple[Story, Quest]:
    """A quest brought to ``target`` by the canonical events, all accepted.

    Main-line states are reached along the main line. ``rolled_back`` comes from a regression
    while watching; ``parked`` from a pause at ``at``; ``handed_off`` from ann's claim at the
    checkpoint ``at``; ``abandoned`` from a kill at ``at``.
    """
    story = Story(quest_id)
    extra = {
        S.ROLLED_BACK: (S.WATCHING, lambda: story("regression_observed", summary="5xx up")),
        S.PARKED: (at, lambda: story("paused", reason="holiday", actor=HOLDER)),
        S.HANDED_OFF: (at, lambda: story("claimed", actor=HOLDER)),
        S.ABANDONED: (at, lambda: story("killed", reason="not worth it", actor=HOLDER)),
    }
    stop, last = extra.get(target, (target, None))
    quest: Quest | None = None
    for _ in range(len(MAIN_LINE) + 1):
        if quest is not None and quest.state is stop:
            break
        event = next_event(story, quest, route=route, risk=risk, checks=checks)
        quest = accept(quest, event, policy).quest
    else:
        raise AssertionError(f"the main line did not reach {stop} under this policy")
    if last is not None:
        quest = accept(quest, last(), policy).quest
    assert quest is not None and quest.state is target
    return story, quest


def keys(decision: Decision) -> list[str]:
    return [e.key for e in decision.effects]


def types(decision: Decision) -> list[str]:
    return [str(e.type) for e in decision.effects]


def payload(decision: Decision, effect_type: str) -> dict[str, Any]:
    (found,) = [e.payload for e in decision.effects if e.type == effect_type]
    return found


def assert_refused(decision: Decision, before: Quest | None, reason: str) -> None:
    assert decision.outcome == "refused"
    assert decision.reason == reason
    assert decision.effects == ()
    assert decision.quest == before
    if before is not None:
        assert decision.state == before.state
        assert decision.revision == before.revision


def assert_keys_parse(decision: Decision) -> None:
    for effect in decision.effects:
        parsed = parse_effect_key(effect.key)
        assert parsed.trail == decision.quest_id
        assert parsed.revision == decision.revision
        assert parsed.type == effect.type
        assert parsed.event == decision.event_id


def signal(sid: str = "s2", fingerprint: str = "fp1", severity: str = "error") -> dict[str, str]:
    return {"id": sid, "fingerprint": fingerprint, "severity": severity, "title": "boom again"}


def proof_with(quest: Quest, overrides: dict[str, Any]) -> dict[str, Any]:
    """A proof_completed payload for ``quest`` with some bundle fields replaced (any of them,
    ``quest`` included, which ``story.bundle_for`` cannot override)."""
    values = {
        "quest": quest.id,
        "revision": quest.revision,
        "risk": quest.risk,
        "base": quest.base,
        "head": quest.patch_head,
    } | overrides
    b = ProofBundle(**values)
    return {"bundle": b.model_dump(mode="json"), "digest": b.digest()}


def _bundle(quest: str) -> dict[str, Any]:
    b = ProofBundle(quest=quest, revision=1, risk="medium", base=BASE, head=HEAD)
    return {"bundle": b.model_dump(mode="json"), "digest": b.digest()}


# One valid set of fields for every event type, for the absorption table.
SAMPLE_FIELDS: dict[str, Callable[[str], dict[str, Any]]] = {
    "signal_sensed": lambda q: {"signal": signal("s9")},
    "triage_decided": lambda q: {"route": "auto_fix"},
    "research_started": lambda q: {},
    "hypothesis_written": lambda q: {"summary": "h"},
    "checkpoint_decided": lambda q: {"checkpoint": "C", "verdict": "approve"},
    "reproduction_recorded": lambda q: {"probe": "p"},
    "reproduction_failed": lambda q: {"reason": "flaky"},
    "patch_recorded": lambda q: {"head": NEW_HEAD, "base": BASE},
    "patch_failed": lambda q: {"reason": "revert_conflict", "files": ["shop/cart.py"]},
    "proof_completed": _bundle,
    "proof_failed": lambda q: {"reason": "red"},
    "probes_requested": lambda q: {"probes": ["p1"]},
    "base_moved": lambda q: {"base": NEW_BASE},
    "landed": lambda q: {"commit": LANDED},
    "landing_failed": lambda q: {"reason": "landing_refused", "detail": "hook declined"},
    "deployment_observed": lambda q: {
        "commit": DEPLOYED,
        "includes": LANDED,
        "environment": "production",
    },
    "checks_reported": lambda q: {"head": HEAD, "checks": [{"name": "tests", "passed": False}]},
    "watch_clean": lambda q: {},
    "regression_observed": lambda q: {},
    "rollback_confirmed": lambda q: {},
    "rollback_failed": lambda q: {"reason": "rollback_conflict", "files": ["shop/cart.py"]},
    "regression_reopened": lambda q: {"signal": signal("s9")},
    "signal_merged": lambda q: {"signal": signal("s9")},
    "paused": lambda q: {},
    "resumed": lambda q: {},
    "claimed": lambda q: {},
    "released": lambda q: {},
    "killed": lambda q: {},
    "comment_added": lambda q: {"body": "late note"},
    "human_revision": lambda q: {"head": NEW_HEAD},
    "child_attached": lambda q: {"child": "q9", "signal": signal("s9")},
    "parent_landed": lambda q: {"parent": "q0"},
    "spend_requested": lambda q: {"request": "r1", "amount_micros": 5, "purpose": "survey"},
    "spend_decided": lambda q: {"request": "r1", "approved": True},
    "usage_recorded": lambda q: {"source": "agent", "cost_micros": 7, "tokens": 3},
}


def sample(story: Story, type_: str, **kw: Any):
    return story(type_, **{**SAMPLE_FIELDS[type_](story.quest), **kw})
