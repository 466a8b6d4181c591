"""Table-driven tests for the mission and work-package state machines."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType

import pytest

from ephyra.core.mission import (
    MISSION_TRANSITIONS,
    REASON_BLOCK_PREVENTS_COMPLETION,
    REASON_MISSION_CANCELLED_IS_FINAL,
    REASON_MISSION_COMPLETED_IS_FINAL,
    REASON_MISSION_FAILED_IS_FINAL,
    REASON_NO_COMPLETION_WITHOUT_EXECUTION,
    REASON_ONLY_HUMAN_CANCELS,
    REASON_SKIPS_REVIEW,
    REASON_WP_DONE_IS_FINAL,
    REASON_WP_DONE_ONLY_VIA_CHECKING,
    REASON_WP_FAILED_IS_FINAL,
    SUPERSEDE_EVIDENCE,
    WP_TRANSITIONS,
    Mission,
    MissionDecision,
    MissionState,
    Role,
    SupersedeRequest,
    TransitionRequest,
    TransitionRule,
    WorkPackage,
    WPState,
    add_work_package,
    decide_mission,
    decide_wp,
    new_mission,
    supersede_mission,
    supersede_wp,
)

AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
LATER = datetime(2025, 3, 1, 13, 0, tzinfo=UTC)
ALL_EVIDENCE = {
    r.evidence: "given" for r in [*MISSION_TRANSITIONS.values(), *WP_TRANSITIONS.values()]
}


def request(
    to: str,
    role: str = "lead",
    evidence: dict[str, str] | None = None,
    actor: str = "alice",
    expected: str | None = None,
    note: str | None = None,
) -> TransitionRequest:
    return TransitionRequest(
        to=to,
        actor=actor,
        role=role,
        evidence=ALL_EVIDENCE if evidence is None else evidence,
        at=LATER,
        request_id="req-1",
        expected=expected,
        note=note,
    )


def mission_in(state: MissionState, **wps: WorkPackage | WPState) -> Mission:
    packages = {
        wp_id: wp if isinstance(wp, WorkPackage) else WorkPackage(wp_id, wp_id, wp)
        for wp_id, wp in wps.items()
    }
    return Mission("m-1", "Mission", AT, AT, state, MappingProxyType(packages))


def mission_satisfying(rule: TransitionRule) -> Mission:
    """A mission in the rule's source state whose WPs meet the rule's guard."""
    wp_state = WPState.READY if rule.target is MissionState.READY else WPState.DONE
    return mission_in(rule.source, wp1=WorkPackage("wp1", "one", wp_state, ("maker-1",), "chk"))


def wp_mission(state: WPState, mission_state: MissionState = MissionState.RUNNING) -> Mission:
    makers = ("maker-1",) if state in (WPState.CHECKING, WPState.DONE) else ()
    return mission_in(mission_state, wp1=WorkPackage("wp1", "one", state, makers))


def first_role(rule: TransitionRule) -> str:
    return sorted(rule.roles)[0]


def assert_refused(decision: MissionDecision, before: Mission, reason: str) -> None:
    assert decision.accepted is False
    assert decision.reason == reason
    assert decision.mission is before


def sid(rule: TransitionRule) -> str:
    return f"{rule.source}->{rule.target}"


MISSION_RULES = list(MISSION_TRANSITIONS.values())
WP_RULES = list(WP_TRANSITIONS.values())


# --- allowed tables ---------------------------------------------------------------------


@pytest.mark.parametrize("rule", MISSION_RULES, ids=sid)
def test_every_allowed_mission_transition_is_accepted(rule: TransitionRule) -> None:
    before = mission_satisfying(rule)
    decision = decide_mission(
        before, request(rule.target, first_role(rule), {rule.evidence: "see ticket 7"})
    )
    assert decision.accepted, decision.reason
    assert decision.reason is None
    assert decision.mission.state is rule.target
    assert decision.mission.updated_at == LATER
    if rule.recovery:
        (entry,) = decision.mission.ledger
        assert (entry.sequence, entry.subject, entry.subject_kind) == (1, "m-1", "mission")
        assert (entry.from_state, entry.to_state) == (rule.source, rule.target)
        assert (entry.actor, entry.role, entry.request_id) == ("alice", first_role(rule), "req-1")
        assert entry.evidence == ((rule.evidence, "see ticket 7"),)
        assert entry.reason == rule.description
        assert entry.at == LATER
    else:
        assert decision.mission.ledger == ()


@pytest.mark.parametrize("rule", WP_RULES, ids=sid)
def test_every_allowed_wp_transition_is_accepted(rule: TransitionRule) -> None:
    before = wp_mission(rule.source)
    decision = decide_wp(
        before,
        "wp1",
        request(rule.target, first_role(rule), {rule.evidence: "ref:log/42"}, actor="bob"),
    )
    assert decision.accepted, decision.reason
    assert decision.mission.work_packages["wp1"].state is rule.target
    assert decision.mission.state is MissionState.RUNNING
    if rule.recovery:
        (entry,) = decision.mission.ledger
        assert (entry.sequence, entry.subject, entry.subject_kind) == (1, "wp1", "work_package")
        assert (entry.from_state, entry.to_state) == (rule.source, rule.target)
        assert entry.evidence == ((rule.evidence, "ref:log/42"),)
    else:
        assert decision.mission.ledger == ()


def test_the_recovery_rows_are_exactly_the_ones_leaving_a_hold_or_repairing() -> None:
    holds = {
        MissionState.BLOCKED,
        MissionState.PAUSED,
        MissionState.ESCALATED,
        WPState.BLOCKED,
        WPState.ESCALATED,
    }
    repairs = {(MissionState.REVIEW, MissionState.RUNNING), (WPState.CHECKING, WPState.IN_PROGRESS)}
    for table in (MISSION_TRANSITIONS, WP_TRANSITIONS):
        for key, rule in table.items():
            assert rule.recovery == (rule.source in holds or key in repairs), key


def test_every_rule_names_a_snake_case_evidence_item() -> None:
    for rule in [*MISSION_RULES, *WP_RULES]:
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", rule.evidence), rule


# --- named forbidden transitions --------------------------------------------------------

NAMED_MISSION_FORBIDDEN = [
    (MissionState.RUNNING, MissionState.COMPLETED, REASON_SKIPS_REVIEW),
    (MissionState.CREATED, MissionState.COMPLETED, REASON_NO_COMPLETION_WITHOUT_EXECUTION),
    (MissionState.PLANNING, MissionState.COMPLETED, REASON_NO_COMPLETION_WITHOUT_EXECUTION),
    (MissionState.READY, MissionState.COMPLETED, REASON_NO_COMPLETION_WITHOUT_EXECUTION),
    (MissionState.BLOCKED, MissionState.COMPLETED, REASON_BLOCK_PREVENTS_COMPLETION),
    *[(MissionState.FAILED, t, REASON_MISSION_FAILED_IS_FINAL) for t in MissionState],
    *[(MissionState.CANCELLED, t, REASON_MISSION_CANCELLED_IS_FINAL) for t in MissionState],
    *[(MissionState.COMPLETED, t, REASON_MISSION_COMPLETED_IS_FINAL) for t in MissionState],
]


@pytest.mark.parametrize(
    ("source", "target", "reason"),
    NAMED_MISSION_FORBIDDEN,
    ids=[f"{s}->{t}" for s, t, _ in NAMED_MISSION_FORBIDDEN],
)
@pytest.mark.parametrize("role", ["human", "higher"])
def test_a_named_forbidden_mission_transition_is_refused_with_its_reason(
    source: MissionState, target: MissionState, reason: str, role: str
) -> None:
    before = mission_in(source, wp1=WPState.DONE)
    assert_refused(decide_mission(before, request(target, role)), before, reason)


def test_a_mission_cannot_skip_the_review() -> None:
    before = mission_in(MissionState.RUNNING, wp1=WPState.DONE)
    decision = decide_mission(before, request("completed", "higher"))
    assert_refused(
        decision, before, "forbidden: RUNNING -> COMPLETED skips the review; move to REVIEW first"
    )


def test_a_failed_mission_is_never_revived() -> None:
    before = mission_in(MissionState.FAILED, wp1=WPState.DONE)
    assert_refused(
        decide_mission(before, request("running", "human")),
        before,
        "forbidden: a FAILED mission is final and is never revived; "
        "create a new mission that supersedes it",
    )


NON_CHECKING = [
    s for s in WPState if s is not WPState.CHECKING and s not in (WPState.DONE, WPState.FAILED)
]


@pytest.mark.parametrize("source", NON_CHECKING)
def test_a_wp_cannot_be_done_without_checking(source: WPState) -> None:
    before = wp_mission(source)
    decision = decide_wp(before, "wp1", request("done", "checker", actor="carol"))
    assert_refused(decision, before, REASON_WP_DONE_ONLY_VIA_CHECKING)
    assert REASON_WP_DONE_ONLY_VIA_CHECKING == (
        "forbidden: a work package reaches DONE only from CHECKING, after a passed check"
    )


@pytest.mark.parametrize("target", list(WPState))
def test_a_failed_wp_is_final(target: WPState) -> None:
    before = wp_mission(WPState.FAILED)
    assert_refused(
        decide_wp(before, "wp1", request(target, "human")), before, REASON_WP_FAILED_IS_FINAL
    )


@pytest.mark.parametrize("target", list(WPState))
def test_a_done_wp_does_not_move(target: WPState) -> None:
    before = wp_mission(WPState.DONE)
    assert_refused(
        decide_wp(before, "wp1", request(target, "lead")), before, REASON_WP_DONE_IS_FINAL
    )


def _named(source: MissionState, target: MissionState) -> bool:
    return any(s is source and t is target for s, t, _ in NAMED_MISSION_FORBIDDEN)


GENERIC_MISSION = [
    (s, t)
    for s, t in itertools.product(MissionState, MissionState)
    if (s, t) not in MISSION_TRANSITIONS and not _named(s, t) and t is not MissionState.CANCELLED
]
GENERIC_WP = [
    (s, t)
    for s, t in itertools.product(WPState, WPState)
    if (s, t) not in WP_TRANSITIONS
    and t is not WPState.DONE
    and s not in (WPState.DONE, WPState.FAILED)
]


@pytest.mark.parametrize(
    ("source", "target"), GENERIC_MISSION, ids=[f"{s}->{t}" for s, t in GENERIC_MISSION]
)
def test_any_other_mission_transition_gets_the_generic_refusal(
    source: MissionState, target: MissionState
) -> None:
    before = mission_in(source, wp1=WPState.DONE)
    targets = ", ".join(t.name for s, t in MISSION_TRANSITIONS if s is source) or "none"
    assert_refused(
        decide_mission(before, request(target, "human")),
        before,
        f"forbidden: {source.name} -> {target.name} is not an allowed transition; "
        f"allowed from {source.name}: {targets}",
    )


@pytest.mark.parametrize(("source", "target"), GENERIC_WP, ids=[f"{s}->{t}" for s, t in GENERIC_WP])
def test_any_other_wp_transition_gets_the_generic_refusal(source: WPState, target: WPState) -> None:
    before = wp_mission(source)
    targets = ", ".join(t.name for s, t in WP_TRANSITIONS if s is source)
    assert_refused(
        decide_wp(before, "wp1", request(target, "lead")),
        before,
        f"forbidden: {source.name} -> {target.name} is not an allowed transition; "
        f"allowed from {source.name}: {targets}",
    )


def test_the_generic_refusal_lists_the_allowed_targets() -> None:
    before = mission_in(MissionState.CREATED)
    assert decide_mission(before, request("running")).reason == (
        "forbidden: CREATED -> RUNNING is not an allowed transition; allowed from CREATED: PLANNING"
    )


# --- roles, cancelling, evidence --------------------------------------------------------

WRONG_MISSION_ROLES = [
    (rule, role)
    for rule in MISSION_RULES
    for role in Role
    if role not in rule.roles and rule.target is not MissionState.CANCELLED
]
WRONG_WP_ROLES = [(rule, role) for rule in WP_RULES for role in Role if role not in rule.roles]


@pytest.mark.parametrize(
    ("rule", "role"),
    WRONG_MISSION_ROLES,
    ids=[f"{sid(r)}-{role}" for r, role in WRONG_MISSION_ROLES],
)
def test_a_mission_transition_refuses_a_role_not_allowed_for_it(
    rule: TransitionRule, role: Role
) -> None:
    before = mission_satisfying(rule)
    allowed = ", ".join(sorted(rule.roles))
    assert_refused(
        decide_mission(before, request(rule.target, role)),
        before,
        f"role '{role}' may not trigger mission {rule.source.name} -> "
        f"{rule.target.name}; allowed: {allowed}",
    )


@pytest.mark.parametrize(
    ("rule", "role"), WRONG_WP_ROLES, ids=[f"{sid(r)}-{role}" for r, role in WRONG_WP_ROLES]
)
def test_a_wp_transition_refuses_a_role_not_allowed_for_it(
    rule: TransitionRule, role: Role
) -> None:
    before = wp_mission(rule.source)
    allowed = ", ".join(sorted(rule.roles))
    assert_refused(
        decide_wp(before, "wp1", request(rule.target, role, actor="bob")),
        before,
        f"role '{role}' may not trigger work package {rule.source.name} -> "
        f"{rule.target.name}; allowed: {allowed}",
    )


CANCEL_SOURCES = [s for s, t in MISSION_TRANSITIONS if t is MissionState.CANCELLED]


@pytest.mark.parametrize("source", CANCEL_SOURCES)
@pytest.mark.parametrize("role", [r for r in Role if r is not Role.HUMAN])
def test_only_a_human_cancels(source: MissionState, role: Role) -> None:
    before = mission_in(source)
    assert_refused(
        decide_mission(before, request("cancelled", role)), before, REASON_ONLY_HUMAN_CANCELS
    )


def test_a_non_human_cannot_cancel_even_where_cancelling_is_not_listed() -> None:
    before = mission_in(MissionState.CREATED)
    assert_refused(
        decide_mission(before, request("cancelled", "lead")), before, REASON_ONLY_HUMAN_CANCELS
    )


def test_a_human_cancels_a_running_mission() -> None:
    decision = decide_mission(
        mission_in(MissionState.RUNNING), request("cancelled", "human", {"cancel_order": "stop it"})
    )
    assert decision.accepted
    assert decision.mission.state is MissionState.CANCELLED


@pytest.mark.parametrize("rule", [*MISSION_RULES, *WP_RULES], ids=sid)
@pytest.mark.parametrize("kind", ["none", "another_item", "blank_text", "not_text"])
def test_a_transition_without_its_evidence_is_refused(rule: TransitionRule, kind: str) -> None:
    evidence: dict = {
        "none": {},
        "another_item": {"unrelated": "text"},
        "blank_text": {rule.evidence: "   "},
        "not_text": {rule.evidence: 42},
    }[kind]
    if isinstance(rule.source, MissionState):
        before = mission_satisfying(rule)
        decision = decide_mission(before, request(rule.target, first_role(rule), evidence))
        what = "mission"
    else:
        before = wp_mission(rule.source)
        decision = decide_wp(
            before, "wp1", request(rule.target, first_role(rule), evidence, actor="bob")
        )
        what = "work package"
    assert_refused(
        decision,
        before,
        f"missing evidence '{rule.evidence}' for {what} {rule.source.name} -> {rule.target.name}",
    )


def test_unknown_roles_states_and_empty_actors_are_refusals_not_exceptions() -> None:
    before = mission_in(MissionState.CREATED)
    assert_refused(
        decide_mission(before, request("planning", "janitor")),
        before,
        "unknown role 'janitor'; known roles: "
        "lead, maker, debugger, checker, human, higher, circuit",
    )
    assert_refused(
        decide_mission(before, request("flying")), before, "unknown mission state 'flying'"
    )
    assert_refused(
        decide_mission(before, request("planning", actor="  ")),
        before,
        "an actor id is required for mission CREATED -> PLANNING",
    )
    wp_before = wp_mission(WPState.TODO)
    assert_refused(
        decide_wp(wp_before, "wp1", request("sideways")),
        wp_before,
        "unknown work package state 'sideways'",
    )


def test_states_and_roles_may_be_given_as_plain_strings_in_any_case() -> None:
    decision = decide_mission(
        mission_in(MissionState.CREATED), request("PLANNING", "Lead", expected="created")
    )
    assert decision.accepted


# --- checker independence and WP guards -------------------------------------------------


def _through_checking(mission: Mission, maker: str, role: str = "maker") -> Mission:
    decision = decide_wp(mission, "wp1", request("checking", role, actor=maker))
    assert decision.accepted, decision.reason
    return decision.mission


def test_the_checker_must_differ_from_the_maker() -> None:
    checking = _through_checking(wp_mission(WPState.IN_PROGRESS), "mallory")
    assert checking.work_packages["wp1"].makers == ("mallory",)
    decision = decide_wp(checking, "wp1", request("done", "checker", actor="mallory"))
    assert_refused(
        decision,
        checking,
        "checker independence: 'mallory' produced work package 'wp1' and may not pass its check",
    )
    passed = decide_wp(checking, "wp1", request("done", "checker", actor="carol"))
    assert passed.accepted
    assert passed.mission.work_packages["wp1"].checker == "carol"


def test_a_lead_who_made_the_result_cannot_pass_it_either() -> None:
    checking = _through_checking(wp_mission(WPState.IN_PROGRESS), "lena", role="debugger")
    assert not decide_wp(checking, "wp1", request("done", "lead", actor="lena")).accepted


def test_everyone_who_produced_a_result_stays_excluded_after_a_repair_cycle() -> None:
    checking = _through_checking(wp_mission(WPState.IN_PROGRESS), "mallory")
    repair = decide_wp(checking, "wp1", request("in_progress", "lead", actor="lena"))
    assert repair.accepted
    assert repair.mission.ledger[0].to_state == WPState.IN_PROGRESS
    again = _through_checking(repair.mission, "dave", role="debugger")
    assert again.work_packages["wp1"].makers == ("mallory", "dave")
    for actor in ("mallory", "dave"):
        assert not decide_wp(again, "wp1", request("done", "checker", actor=actor)).accepted
    assert decide_wp(again, "wp1", request("done", "checker", actor="carol")).accepted


FULL_WIDTH_MALLORY = "\uff4d\uff41\uff4c\uff4c\uff4f\uff52\uff59"


@pytest.mark.parametrize("checker", ["mallory ", " mallory", "\tmallory\n", FULL_WIDTH_MALLORY])
def test_a_maker_cannot_pass_their_own_check_by_spelling_their_name_differently(
    checker: str,
) -> None:
    # Until actors are user accounts, a name is free text: surrounding white space and
    # compatibility forms (NFKC: full-width letters) do not make another person.
    checking = _through_checking(wp_mission(WPState.IN_PROGRESS), "mallory")
    decision = decide_wp(checking, "wp1", request("done", "checker", actor=checker))
    assert_refused(
        decision,
        checking,
        "checker independence: 'mallory' produced work package 'wp1' and may not pass its check",
    )


def test_a_makers_name_is_recorded_without_the_white_space_around_it() -> None:
    checking = _through_checking(wp_mission(WPState.IN_PROGRESS), "  mallory ")
    assert checking.work_packages["wp1"].makers == ("mallory",)
    again = _through_checking(
        decide_wp(checking, "wp1", request("in_progress", "lead", actor="lena")).mission,
        "mallory\u3000",  # an ideographic space: white space too
    )
    assert again.work_packages["wp1"].makers == ("mallory",)
    passed = decide_wp(again, "wp1", request("done", "checker", actor=" carol"))
    assert passed.mission.work_packages["wp1"].checker == "carol"


def test_the_attempt_ledger_names_the_actor_without_the_white_space_around_it() -> None:
    checking = _through_checking(wp_mission(WPState.IN_PROGRESS), "mallory")
    repair = decide_wp(checking, "wp1", request("in_progress", "lead", actor=" lena "))
    assert repair.mission.ledger[-1].actor == "lena"


@pytest.mark.parametrize("blank", ["", "   ", "\u3000", "\u00a0\t"])
def test_a_blank_actor_name_is_refused_for_a_work_package(blank: str) -> None:
    before = wp_mission(WPState.IN_PROGRESS)
    assert_refused(
        decide_wp(before, "wp1", request("checking", "maker", actor=blank)),
        before,
        "an actor id is required for work package IN_PROGRESS -> CHECKING",
    )


def test_work_on_a_wp_starts_only_while_the_mission_is_running() -> None:
    before = wp_mission(WPState.READY, MissionState.PAUSED)
    assert_refused(
        decide_wp(before, "wp1", request("in_progress")),
        before,
        "work on a package starts only while the mission is RUNNING; it is PAUSED",
    )


@pytest.mark.parametrize(
    "state", [MissionState.COMPLETED, MissionState.FAILED, MissionState.CANCELLED]
)
def test_the_wps_of_a_finished_mission_do_not_move(state: MissionState) -> None:
    before = wp_mission(WPState.IN_PROGRESS, state)
    assert_refused(
        decide_wp(before, "wp1", request("checking", "maker")),
        before,
        f"forbidden: the mission is {state.name}, which is final; its work packages do not move",
    )


# --- completion and milestones ----------------------------------------------------------


def test_completion_requires_every_wp_to_be_done() -> None:
    before = mission_in(
        MissionState.REVIEW, a=WPState.DONE, b=WPState.IN_PROGRESS, c=WPState.CHECKING
    )
    assert_refused(
        decide_mission(before, request("completed", "checker")),
        before,
        "completion needs every work package DONE; not done: b, c",
    )


def test_completion_by_a_higher_decision_also_requires_every_wp_done() -> None:
    before = mission_in(MissionState.ESCALATED, a=WPState.DONE, b=WPState.BLOCKED)
    assert_refused(
        decide_mission(before, request("completed", "higher")),
        before,
        "completion needs every work package DONE; not done: b",
    )


def test_a_failed_wp_blocks_completion_until_it_is_superseded() -> None:
    before = mission_in(MissionState.REVIEW, a=WPState.DONE, b=WPState.FAILED)
    assert not decide_mission(before, request("completed", "checker")).accepted
    replaced = mission_in(
        MissionState.REVIEW,
        a=WPState.DONE,
        b=WPState.FAILED,
        b2=WorkPackage("b2", "b again", WPState.DONE, supersedes="b"),
    )
    decision = decide_mission(replaced, request("completed", "checker"))
    assert decision.accepted
    assert [wp.wp_id for wp in replaced.active_work_packages()] == ["a", "b2"]


def test_a_mission_without_wps_cannot_complete() -> None:
    before = mission_in(MissionState.ESCALATED)
    assert_refused(
        decide_mission(before, request("completed", "higher")),
        before,
        REASON_NO_COMPLETION_WITHOUT_EXECUTION,
    )


def test_review_needs_a_done_wp_as_the_milestone() -> None:
    before = mission_in(MissionState.RUNNING, a=WPState.CHECKING)
    assert_refused(
        decide_mission(before, request("review")),
        before,
        "RUNNING -> REVIEW needs at least one DONE work package (the milestone)",
    )


def test_a_plan_is_valid_only_with_wps_that_are_all_ready() -> None:
    empty = mission_in(MissionState.PLANNING)
    assert_refused(
        decide_mission(empty, request("ready")),
        empty,
        "plan not valid: the mission has no work packages",
    )
    half = mission_in(MissionState.PLANNING, a=WPState.READY, b=WPState.TODO)
    assert_refused(
        decide_mission(half, request("ready")), half, "plan not valid: work packages not READY: b"
    )


# --- failed is final, supersede ---------------------------------------------------------


def supersede(
    new_id: str = "wp1b", role: str = "lead", evidence: dict[str, str] | None = None
) -> SupersedeRequest:
    return SupersedeRequest(
        new_id=new_id,
        title="second try",
        actor="lena",
        role=role,
        evidence={SUPERSEDE_EVIDENCE: "flaky fixture"} if evidence is None else evidence,
        at=LATER,
        request_id="req-9",
    )


def test_a_failed_wp_is_replaced_by_a_new_linked_wp_in_todo() -> None:
    before = wp_mission(WPState.FAILED)
    decision = supersede_wp(before, "wp1", supersede())
    assert decision.accepted
    new = decision.mission.work_packages["wp1b"]
    assert (new.state, new.supersedes, new.title) == (WPState.TODO, "wp1", "second try")
    assert decision.mission.work_packages["wp1"] == before.work_packages["wp1"]
    (entry,) = decision.mission.ledger
    assert (entry.subject, entry.from_state, entry.to_state) == ("wp1", "failed", "todo")
    assert entry.reason == "superseded by work package 'wp1b'"
    assert entry.evidence == ((SUPERSEDE_EVIDENCE, "flaky fixture"),)


def test_superseding_is_refused_for_wps_that_have_not_failed_or_were_already_replaced() -> None:
    alive = wp_mission(WPState.BLOCKED)
    assert_refused(
        supersede_wp(alive, "wp1", supersede()),
        alive,
        "only a FAILED work package can be superseded; 'wp1' is BLOCKED",
    )
    once = supersede_wp(wp_mission(WPState.FAILED), "wp1", supersede()).mission
    assert_refused(
        supersede_wp(once, "wp1", supersede("wp1c")),
        once,
        "work package 'wp1' is already superseded",
    )
    assert_refused(
        supersede_wp(once, "wp1", supersede("wp1b")),
        once,
        "work package 'wp1' is already superseded",
    )


def test_superseding_a_wp_checks_role_evidence_and_the_new_id() -> None:
    before = wp_mission(WPState.FAILED)
    assert not supersede_wp(before, "wp1", supersede(role="maker")).accepted
    assert_refused(
        supersede_wp(before, "wp1", supersede(evidence={})),
        before,
        "missing evidence 'failure_analysis' for superseding work package 'wp1'",
    )
    assert_refused(
        supersede_wp(before, "wp1", supersede(new_id="wp1")),
        before,
        "the new work package id 'wp1' is empty or taken",
    )


def test_a_failed_mission_is_replaced_by_a_new_linked_mission_in_created() -> None:
    failed = mission_in(MissionState.FAILED, wp1=WPState.FAILED)
    decision = supersede_mission(failed, supersede("m-2", role="human"))
    assert decision.accepted
    fresh = decision.mission
    assert (fresh.mission_id, fresh.state, fresh.supersedes) == ("m-2", "created", "m-1")
    assert fresh.work_packages == {}
    assert (fresh.created_at, fresh.updated_at) == (LATER, LATER)
    (entry,) = fresh.ledger
    assert (entry.sequence, entry.subject, entry.from_state, entry.to_state) == (
        1,
        "m-1",
        "failed",
        "created",
    )
    assert failed.state is MissionState.FAILED and failed.ledger == ()


def test_only_a_failed_mission_can_be_superseded() -> None:
    cancelled = mission_in(MissionState.CANCELLED)
    assert_refused(
        supersede_mission(cancelled, supersede("m-2")),
        cancelled,
        "only a FAILED mission can be superseded; 'm-1' is CANCELLED",
    )
    failed = mission_in(MissionState.FAILED)
    assert not supersede_mission(failed, supersede("m-1")).accepted
    assert not supersede_mission(failed, supersede("m-2", role="checker")).accepted


# --- ask a human --------------------------------------------------------------------------


def test_an_unknown_wp_means_stop_and_ask_a_human() -> None:
    before = wp_mission(WPState.TODO)
    assert_refused(
        decide_wp(before, "wp-404", request("ready")),
        before,
        "state unclear: unknown work package 'wp-404'; stop and ask a human",
    )
    assert_refused(
        supersede_wp(before, "wp-404", supersede()),
        before,
        "state unclear: unknown work package 'wp-404'; stop and ask a human",
    )


def test_a_request_expecting_another_mission_state_means_ask_a_human() -> None:
    before = mission_in(MissionState.RUNNING, wp1=WPState.DONE)
    assert_refused(
        decide_mission(before, request("review", expected="paused")),
        before,
        "state unclear: request expects mission state 'paused' but it is RUNNING; "
        "stop and ask a human",
    )
    assert decide_mission(before, request("review", expected="running")).accepted


def test_a_request_expecting_another_wp_state_means_ask_a_human() -> None:
    before = wp_mission(WPState.BLOCKED)
    assert_refused(
        decide_wp(before, "wp1", request("in_progress", expected="checking")),
        before,
        "state unclear: request expects work package 'wp1' in 'checking' "
        "but it is BLOCKED; stop and ask a human",
    )


# --- construction and the ledger ----------------------------------------------------------


def test_wps_can_be_added_only_while_the_mission_is_planned() -> None:
    mission = new_mission("m-1", "Mission", AT)
    assert (mission.state, mission.created_at, mission.ledger) == ("created", AT, ())
    added = add_work_package(mission, "wp1", "one", LATER)
    assert added.accepted and added.mission.work_packages["wp1"].state is WPState.TODO
    assert_refused(
        add_work_package(added.mission, "wp1", "dup", LATER),
        added.mission,
        "work package 'wp1' already exists",
    )
    assert not add_work_package(added.mission, "", "blank", LATER).accepted
    running = mission_in(MissionState.RUNNING)
    assert_refused(
        add_work_package(running, "wp9", "late", LATER),
        running,
        "work packages can only be added while CREATED or PLANNING; the mission is RUNNING",
    )


def test_a_mission_needs_an_id() -> None:
    with pytest.raises(ValueError, match="mission_id"):
        new_mission(" ", "Mission", AT)


def test_the_ledger_numbers_recoveries_consecutively_and_keeps_notes() -> None:
    mission = mission_in(MissionState.RUNNING, wp1=WPState.IN_PROGRESS)
    steps = [
        ("mission", "blocked", "circuit"),
        ("mission", "running", "lead"),
        ("wp1", "blocked", "lead"),
        ("wp1", "escalated", "lead"),
        ("wp1", "in_progress", "human"),
        ("mission", "paused", "lead"),
        ("mission", "running", "lead"),
    ]
    for subject, to, role in steps:
        req = request(to, role, note=f"note {to}")
        decision = (
            decide_mission(mission, req)
            if subject == "mission"
            else decide_wp(mission, subject, req)
        )
        assert decision.accepted, decision.reason
        mission = decision.mission
    assert [e.sequence for e in mission.ledger] == [1, 2, 3, 4]
    assert [(e.subject, e.from_state, e.to_state) for e in mission.ledger] == [
        ("m-1", "blocked", "running"),
        ("wp1", "blocked", "escalated"),
        ("wp1", "escalated", "in_progress"),
        ("m-1", "paused", "running"),
    ]
    assert [e.reason for e in mission.ledger] == [
        "note running",
        "note escalated",
        "note in_progress",
        "note running",
    ]


# --- documentation stays in step with the tables -----------------------------------------


def test_the_docs_list_every_transition_and_its_evidence() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "missions.md").read_text("utf-8")
    for rule in [*MISSION_RULES, *WP_RULES]:
        assert f"`{rule.evidence}`" in text, rule
    for reason in (
        REASON_SKIPS_REVIEW,
        REASON_NO_COMPLETION_WITHOUT_EXECUTION,
        REASON_BLOCK_PREVENTS_COMPLETION,
        REASON_MISSION_FAILED_IS_FINAL,
        REASON_MISSION_CANCELLED_IS_FINAL,
        REASON_ONLY_HUMAN_CANCELS,
        REASON_WP_DONE_ONLY_VIA_CHECKING,
        REASON_WP_FAILED_IS_FINAL,
    ):
        assert reason in text, reason
