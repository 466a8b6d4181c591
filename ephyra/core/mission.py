"""Mission and work-package state machines.

Both machines are pure decision functions: they take the current mission and a request and
return a decision carrying the next mission. Time and identifiers arrive in the request, so the
same inputs always give the same answer and every decision can be replayed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeVar

from ephyra.core.actors import normalise_actor

_E = TypeVar("_E", bound=StrEnum)


class MissionState(StrEnum):
    CREATED = "created"
    PLANNING = "planning"
    READY = "ready"
    RUNNING = "running"
    REVIEW = "review"
    COMPLETED = "completed"
    BLOCKED = "blocked"
    PAUSED = "paused"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ESCALATED = "escalated"


class WPState(StrEnum):
    TODO = "todo"
    READY = "ready"
    IN_PROGRESS = "in_progress"
    CHECKING = "checking"
    DONE = "done"
    FAILED = "failed"
    BLOCKED = "blocked"
    ESCALATED = "escalated"


class Role(StrEnum):
    LEAD = "lead"
    MAKER = "maker"
    DEBUGGER = "debugger"
    CHECKER = "checker"
    HUMAN = "human"
    HIGHER = "higher"
    CIRCUIT = "circuit"


FINAL_MISSION_STATES = frozenset(
    {MissionState.COMPLETED, MissionState.FAILED, MissionState.CANCELLED}
)
FINAL_WP_STATES = frozenset({WPState.DONE, WPState.FAILED})
PLANNING_STATES = frozenset({MissionState.CREATED, MissionState.PLANNING})


@dataclass(frozen=True, slots=True)
class TransitionRule:
    source: MissionState | WPState
    target: MissionState | WPState
    roles: frozenset[Role]
    evidence: str
    description: str
    recovery: bool = False  # recoveries are written to the attempt ledger


def _table(rows: str, kind: type[StrEnum]) -> dict[tuple[Any, Any], TransitionRule]:
    """Build a transition table from rows: from, to, roles (a|b), evidence, recovery, description.

    A text table keeps each rule on one readable line, which is how the rules are reviewed.
    """
    table: dict[tuple[Any, Any], TransitionRule] = {}
    for line in rows.strip().splitlines():
        source, target, roles, evidence, recovery, description = line.split(maxsplit=5)
        rule = TransitionRule(
            kind(source),
            kind(target),
            frozenset(Role(r) for r in roles.split("|")),
            evidence,
            description,
            recovery == "R",
        )
        table[(rule.source, rule.target)] = rule
    return table


# R marks a recovery: it is written to the attempt ledger.
MISSION_TRANSITIONS = _table(
    """
created   planning  lead          mission_brief            -  planning starts from a brief
planning  ready     lead          plan_validated           -  plan and work packages are valid
planning  blocked   lead|circuit  plan_validation_missing  -  the plan cannot be validated
ready     running   lead          start_approved           -  start approved
running   review    lead          wp_done_milestone        -  a work package is done
review    completed checker|lead  all_wps_passed           -  every relevant work package passed
review    running   lead          rework_needed            R  the review asks for rework
running   paused    lead          no_progress              -  no progress
paused    running   lead          release                  R  released after a pause
running   blocked   lead|circuit  trigger_documented       -  block triggered
blocked   paused    lead          block_resolved           R  block resolved, waiting
blocked   running   lead          release                  R  released after a block
blocked   escalated lead          block_and_need           R  the block needs a higher decision
paused    cancelled human         cancel_order             R  cancelled while paused
running   failed    lead          final_error              -  final error
running   cancelled human         cancel_order             -  cancelled while running
blocked   cancelled human         cancel_order             R  cancelled while blocked
escalated running   human|higher  decision_and_release     R  decision taken, work released
escalated cancelled human         cancel_decision          R  the decision is to cancel
escalated completed higher        decision_ok              R  the decision accepts the result
""",
    MissionState,
)

WP_TRANSITIONS = _table(
    """
todo        ready       lead            plan_validated    -  planned and validated
ready       in_progress lead            start_approved    -  delegated to a quest
in_progress checking    maker|debugger  result_produced   -  result produced
checking    done        checker|lead    check_passed      -  check passed
checking    in_progress lead            check_failed      R  check failed, repair cycle
in_progress failed      lead            beyond_repair     -  beyond repair
in_progress blocked     lead|circuit    block_documented  -  block documented
blocked     in_progress lead            block_resolved    R  block resolved
blocked     escalated   lead            block_and_need    R  the block needs a higher decision
escalated   in_progress higher|human    release           R  released by decision
escalated   failed      higher|human    decision          R  decided to give up
""",
    WPState,
)

SUPERSEDE_ROLES = frozenset({Role.LEAD, Role.HUMAN, Role.HIGHER})
SUPERSEDE_EVIDENCE = "failure_analysis"

REASON_SKIPS_REVIEW = "forbidden: RUNNING -> COMPLETED skips the review; move to REVIEW first"
REASON_NO_COMPLETION_WITHOUT_EXECUTION = "forbidden: no completion without execution and review"
REASON_BLOCK_PREVENTS_COMPLETION = "forbidden: a block prevents completion; resolve the block first"
REASON_MISSION_FAILED_IS_FINAL = (
    "forbidden: a FAILED mission is final and is never revived; "
    "create a new mission that supersedes it"
)
REASON_MISSION_CANCELLED_IS_FINAL = "forbidden: a CANCELLED mission cannot be reactivated"
REASON_MISSION_COMPLETED_IS_FINAL = "forbidden: a COMPLETED mission is final"
REASON_ONLY_HUMAN_CANCELS = "forbidden: only a human may cancel a mission"
REASON_WP_DONE_ONLY_VIA_CHECKING = (
    "forbidden: a work package reaches DONE only from CHECKING, after a passed check"
)
REASON_WP_FAILED_IS_FINAL = (
    "forbidden: a FAILED work package is final and is never revived; "
    "create a new work package that supersedes it"
)
REASON_WP_DONE_IS_FINAL = "forbidden: a DONE work package is final"

# Transitions into COMPLETED that have a reason of their own; any other is generic.
_NAMED_COMPLETION_REASONS: dict[MissionState, str] = {
    MissionState.RUNNING: REASON_SKIPS_REVIEW,
    MissionState.CREATED: REASON_NO_COMPLETION_WITHOUT_EXECUTION,
    MissionState.PLANNING: REASON_NO_COMPLETION_WITHOUT_EXECUTION,
    MissionState.READY: REASON_NO_COMPLETION_WITHOUT_EXECUTION,
    MissionState.BLOCKED: REASON_BLOCK_PREVENTS_COMPLETION,
}
_FINAL_MISSION_REASONS: dict[MissionState, str] = {
    MissionState.FAILED: REASON_MISSION_FAILED_IS_FINAL,
    MissionState.CANCELLED: REASON_MISSION_CANCELLED_IS_FINAL,
    MissionState.COMPLETED: REASON_MISSION_COMPLETED_IS_FINAL,
}
_FINAL_WP_REASONS: dict[WPState, str] = {
    WPState.FAILED: REASON_WP_FAILED_IS_FINAL,
    WPState.DONE: REASON_WP_DONE_IS_FINAL,
}


def ask_human(detail: str) -> str:
    return f"state unclear: {detail}; stop and ask a human"


@dataclass(frozen=True, slots=True)
class AttemptEntry:
    sequence: int
    subject: str
    subject_kind: str  # "mission" or "work_package"; ids of the two kinds may coincide
    from_state: str
    to_state: str
    actor: str
    role: Role
    evidence: tuple[tuple[str, str], ...]
    reason: str
    at: datetime
    request_id: str


@dataclass(frozen=True, slots=True)
class WorkPackage:
    wp_id: str
    title: str
    state: WPState = WPState.TODO
    makers: tuple[str, ...] = ()  # everyone who produced a result; none of them may pass it
    checker: str | None = None
    supersedes: str | None = None


def _empty_wps() -> Mapping[str, WorkPackage]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Mission:
    mission_id: str
    title: str
    created_at: datetime
    updated_at: datetime
    state: MissionState = MissionState.CREATED
    work_packages: Mapping[str, WorkPackage] = field(default_factory=_empty_wps)
    ledger: tuple[AttemptEntry, ...] = ()
    supersedes: str | None = None

    def superseded_wp_ids(self) -> frozenset[str]:
        return frozenset(wp.supersedes for wp in self.work_packages.values() if wp.supersedes)

    def active_work_packages(self) -> tuple[WorkPackage, ...]:
        """Every WP that still counts: all but the FAILED ones a newer WP replaced."""
        gone = self.superseded_wp_ids()
        return tuple(
            wp
            for wp in self.work_packages.values()
            if not (wp.state is WPState.FAILED and wp.wp_id in gone)
        )


@dataclass(frozen=True, slots=True)
class TransitionRequest:
    to: str
    actor: str
    role: str
    evidence: Mapping[str, str]
    at: datetime
    request_id: str
    expected: str | None = None
    note: str | None = None  # free text for the ledger; the rule's description otherwise


@dataclass(frozen=True, slots=True)
class SupersedeRequest:
    new_id: str
    title: str
    actor: str
    role: str
    evidence: Mapping[str, str]
    at: datetime
    request_id: str


@dataclass(frozen=True, slots=True)
class MissionDecision:
    mission: Mission
    accepted: bool
    reason: str | None = None


def _refuse(mission: Mission, reason: str) -> MissionDecision:
    return MissionDecision(mission, False, reason)


def _parse(kind: type[_E], value: object) -> _E | None:
    try:
        return kind(str(value).strip().lower())
    except ValueError:
        return None


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _frozen_evidence(evidence: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(evidence, Mapping):
        return ()
    return tuple(sorted((str(k), v) for k, v in evidence.items() if _text(v)))


_R = TypeVar("_R", TransitionRequest, SupersedeRequest)


def _normalised(request: _R) -> _R:
    """The request with its actor's name normalised (``ephyra.core.actors``): the ledger, the
    makers and the checker record that form, and independence compares it."""
    if not isinstance(request.actor, str):
        return request  # _check_caller refuses it
    return replace(request, actor=normalise_actor(request.actor))


def _check_caller(
    request: TransitionRequest | SupersedeRequest, roles: frozenset[Role], required: str, what: str
) -> tuple[Role, None] | tuple[None, str]:
    """Who asks, in which role, with what proof: the checks every request shares."""
    actor, role, evidence = request.actor, request.role, request.evidence
    if not _text(actor):
        return None, f"an actor id is required for {what}"
    parsed = _parse(Role, role)
    if parsed is None:
        return None, f"unknown role '{role}'; known roles: {', '.join(Role)}"
    if parsed not in roles:
        return None, f"role '{parsed}' may not trigger {what}; allowed: {', '.join(sorted(roles))}"
    if not isinstance(evidence, Mapping) or not _text(evidence.get(required)):
        return None, f"missing evidence '{required}' for {what}"
    return parsed, None


def _generic(
    source: StrEnum, target: StrEnum, table: Mapping[tuple[Any, Any], TransitionRule]
) -> str:
    targets = ", ".join(t.name for (s, t) in table if s is source) or "none"
    return (
        f"forbidden: {source.name} -> {target.name} is not an allowed transition; "
        f"allowed from {source.name}: {targets}"
    )


def _append(
    mission: Mission,
    subject: tuple[str, str],
    move: tuple[str, str],
    request: TransitionRequest | SupersedeRequest,
    role: Role,
    reason: str,
) -> tuple[AttemptEntry, ...]:
    """The ledger with one more entry; subject is (id, kind), move is (from, to)."""
    entry = AttemptEntry(
        len(mission.ledger) + 1, *subject, *move, request.actor, role,
        _frozen_evidence(request.evidence), reason, request.at, request.request_id,
    )  # fmt: skip
    return (*mission.ledger, entry)


def _mission_guard(mission: Mission, rule: TransitionRule) -> str | None:
    """Checks the mission's own WPs, so the evidence string alone never suffices."""
    active = mission.active_work_packages()
    if rule.target is MissionState.READY:
        if not active:
            return "plan not valid: the mission has no work packages"
        pending = [wp.wp_id for wp in active if wp.state is not WPState.READY]
        if pending:
            return f"plan not valid: work packages not READY: {', '.join(pending)}"
    if rule.target is MissionState.REVIEW and not any(wp.state is WPState.DONE for wp in active):
        return "RUNNING -> REVIEW needs at least one DONE work package (the milestone)"
    if rule.target is MissionState.COMPLETED:
        if not active:
            return REASON_NO_COMPLETION_WITHOUT_EXECUTION
        open_ids = [wp.wp_id for wp in active if wp.state is not WPState.DONE]
        if open_ids:
            return f"completion needs every work package DONE; not done: {', '.join(open_ids)}"
    return None


def decide_mission(mission: Mission, request: TransitionRequest) -> MissionDecision:
    """Decide a mission transition; a refusal returns the very same mission."""
    request = _normalised(request)
    current = mission.state
    if request.expected is not None and _parse(MissionState, request.expected) is not current:
        return _refuse(
            mission,
            ask_human(
                f"request expects mission state '{request.expected}' but it is {current.name}"
            ),
        )
    if current in FINAL_MISSION_STATES:
        return _refuse(mission, _FINAL_MISSION_REASONS[current])
    target = _parse(MissionState, request.to)
    if target is None:
        return _refuse(mission, f"unknown mission state '{request.to}'")
    if target is MissionState.CANCELLED and _parse(Role, request.role) is not Role.HUMAN:
        return _refuse(mission, REASON_ONLY_HUMAN_CANCELS)
    rule = MISSION_TRANSITIONS.get((current, target))
    if rule is None:
        if target is MissionState.COMPLETED and current in _NAMED_COMPLETION_REASONS:
            return _refuse(mission, _NAMED_COMPLETION_REASONS[current])
        return _refuse(mission, _generic(current, target, MISSION_TRANSITIONS))
    role, reason = _check_caller(
        request, rule.roles, rule.evidence, f"mission {current.name} -> {target.name}"
    )
    if role is None:
        return _refuse(mission, reason or "refused")
    guard = _mission_guard(mission, rule)
    if guard is not None:
        return _refuse(mission, guard)
    ledger = mission.ledger
    if rule.recovery:
        ledger = _append(
            mission,
            (mission.mission_id, "mission"),
            (current, target),
            request,
            role,
            request.note or rule.description,
        )
    return MissionDecision(
        replace(mission, state=target, ledger=ledger, updated_at=request.at), True
    )


def decide_wp(mission: Mission, wp_id: str, request: TransitionRequest) -> MissionDecision:
    """Decide a transition of one work package of the mission."""
    request = _normalised(request)
    wp = mission.work_packages.get(wp_id)
    if wp is None:
        return _refuse(mission, ask_human(f"unknown work package '{wp_id}'"))
    if mission.state in FINAL_MISSION_STATES:
        return _refuse(
            mission,
            f"forbidden: the mission is {mission.state.name}, which is "
            "final; its work packages do not move",
        )
    current = wp.state
    if request.expected is not None and _parse(WPState, request.expected) is not current:
        return _refuse(
            mission,
            ask_human(
                f"request expects work package '{wp_id}' in '{request.expected}' "
                f"but it is {current.name}"
            ),
        )
    if current in FINAL_WP_STATES:
        return _refuse(mission, _FINAL_WP_REASONS[current])
    target = _parse(WPState, request.to)
    if target is None:
        return _refuse(mission, f"unknown work package state '{request.to}'")
    rule = WP_TRANSITIONS.get((current, target))
    if rule is None:
        if target is WPState.DONE:
            return _refuse(mission, REASON_WP_DONE_ONLY_VIA_CHECKING)
        return _refuse(mission, _generic(current, target, WP_TRANSITIONS))
    role, reason = _check_caller(
        request, rule.roles, rule.evidence, f"work package {current.name} -> {target.name}"
    )
    if role is None:
        return _refuse(mission, reason or "refused")
    if current is WPState.READY and mission.state is not MissionState.RUNNING:
        return _refuse(
            mission,
            "work on a package starts only while the mission is RUNNING; "
            f"it is {mission.state.name}",
        )
    if target is WPState.DONE and request.actor in wp.makers:
        return _refuse(
            mission,
            f"checker independence: '{request.actor}' produced work "
            f"package '{wp_id}' and may not pass its check",
        )
    new_wp = replace(wp, state=target)
    if target is WPState.CHECKING and request.actor not in wp.makers:
        new_wp = replace(new_wp, makers=(*wp.makers, request.actor))
    if target is WPState.DONE:
        new_wp = replace(new_wp, checker=request.actor)
    ledger = mission.ledger
    if rule.recovery:
        ledger = _append(
            mission,
            (wp_id, "work_package"),
            (current, target),
            request,
            role,
            request.note or rule.description,
        )
    wps = MappingProxyType({**mission.work_packages, wp_id: new_wp})
    return MissionDecision(
        replace(mission, work_packages=wps, ledger=ledger, updated_at=request.at), True
    )


def new_mission(mission_id: str, title: str, at: datetime) -> Mission:
    """Start a mission in CREATED; an empty id is a programming error, not a request."""
    if not _text(mission_id):
        raise ValueError("mission_id must be non-empty text")
    return Mission(mission_id=mission_id, title=title, created_at=at, updated_at=at)


def add_work_package(mission: Mission, wp_id: str, title: str, at: datetime) -> MissionDecision:
    """Plan a new WP; the set of WPs is only open while the mission is being planned."""
    if mission.state not in PLANNING_STATES:
        return _refuse(
            mission,
            f"work packages can only be added while CREATED or PLANNING; "
            f"the mission is {mission.state.name}",
        )
    if not _text(wp_id):
        return _refuse(mission, "a work package id must be non-empty text")
    if wp_id in mission.work_packages:
        return _refuse(mission, f"work package '{wp_id}' already exists")
    wps = MappingProxyType({**mission.work_packages, wp_id: WorkPackage(wp_id, title)})
    return MissionDecision(replace(mission, work_packages=wps, updated_at=at), True)


def supersede_wp(mission: Mission, failed_wp_id: str, request: SupersedeRequest) -> MissionDecision:
    """Replace a FAILED WP by a new one in TODO that links back to it."""
    request = _normalised(request)
    old = mission.work_packages.get(failed_wp_id)
    if old is None:
        return _refuse(mission, ask_human(f"unknown work package '{failed_wp_id}'"))
    if mission.state in FINAL_MISSION_STATES:
        return _refuse(
            mission,
            f"forbidden: the mission is {mission.state.name}, which is "
            "final; supersede the mission instead",
        )
    if old.state is not WPState.FAILED:
        return _refuse(
            mission,
            f"only a FAILED work package can be superseded; '{failed_wp_id}' is {old.state.name}",
        )
    if failed_wp_id in mission.superseded_wp_ids():
        return _refuse(mission, f"work package '{failed_wp_id}' is already superseded")
    if not _text(request.new_id) or request.new_id in mission.work_packages:
        return _refuse(mission, f"the new work package id '{request.new_id}' is empty or taken")
    role, reason = _check_caller(
        request, SUPERSEDE_ROLES, SUPERSEDE_EVIDENCE, f"superseding work package '{failed_wp_id}'"
    )
    if role is None:
        return _refuse(mission, reason or "refused")
    new_wp = WorkPackage(request.new_id, request.title, supersedes=failed_wp_id)
    ledger = _append(
        mission,
        (failed_wp_id, "work_package"),
        (WPState.FAILED, WPState.TODO),
        request,
        role,
        f"superseded by work package '{request.new_id}'",
    )
    wps = MappingProxyType({**mission.work_packages, request.new_id: new_wp})
    return MissionDecision(
        replace(mission, work_packages=wps, ledger=ledger, updated_at=request.at), True
    )


def supersede_mission(failed: Mission, request: SupersedeRequest) -> MissionDecision:
    """Create a new mission in CREATED linked to a FAILED one; the old one stays untouched."""
    request = _normalised(request)
    if failed.state is not MissionState.FAILED:
        return _refuse(
            failed,
            f"only a FAILED mission can be superseded; "
            f"'{failed.mission_id}' is {failed.state.name}",
        )
    if not _text(request.new_id) or request.new_id == failed.mission_id:
        return _refuse(failed, f"the new mission id '{request.new_id}' is empty or taken")
    role, reason = _check_caller(
        request, SUPERSEDE_ROLES, SUPERSEDE_EVIDENCE, f"superseding mission '{failed.mission_id}'"
    )
    if role is None:
        return _refuse(failed, reason or "refused")
    fresh = Mission(
        mission_id=request.new_id,
        title=request.title,
        created_at=request.at,
        updated_at=request.at,
        supersedes=failed.mission_id,
    )
    ledger = _append(
        fresh,
        (failed.mission_id, "mission"),
        (MissionState.FAILED, MissionState.CREATED),
        request,
        role,
        f"superseded by mission '{request.new_id}'",
    )
    return MissionDecision(replace(fresh, ledger=ledger), True)
