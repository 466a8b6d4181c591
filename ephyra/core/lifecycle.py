"""The transition table, one handler per event type.

A handler takes ``(quest, event, policy)`` and returns either a refusal reason (a string) or the
changes to apply to the quest together with the effects it asks for, as ``(type, payload)``
pairs; ``ephyra.core.machine`` turns those into keyed effects and the next quest.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ephyra.core import events as ev
from ephyra.core.effects import EffectType
from ephyra.core.failures import landing_failed, patch_failed, rollback_failed
from ephyra.core.forge_reports import (
    Outcome,
    Spec,
    checks_reported,
    deployment_observed,
    required_failing,
    start_watch,
    watch_started,
)
from ephyra.core.proof import binding_problem, stale_problem
from ephyra.core.quest import CheckpointRecord, Quest, Usage
from ephyra.core.rules import CheckpointMode, MachinePolicy, WatchStart
from ephyra.core.states import (
    AGENT_STATES,
    CHECKPOINT_STATE,
    CHECKPOINT_STATES,
    REVISE_TARGET,
    STATE_CHECKPOINT,
    Checkpoint,
    State,
    higher_severity,
)

S = State
E = EffectType


# --- helpers the handlers share -------------------------------------------------------------


def _checkpoint_request(cp: Checkpoint, policy: MachinePolicy) -> Spec:
    mode = policy.rule(cp).mode
    return E.REQUEST_CHECKPOINT, {
        "checkpoint": str(cp),
        "mode": str(mode),
        "blocking": mode is CheckpointMode.BLOCKING,
    }


def _agent(step: str, q: Quest, **extra: Any) -> Spec:
    return E.START_AGENT, {"step": step, "revision": q.revision, **extra}


def _work_for(state: State, q: Quest, policy: MachinePolicy) -> list[Spec]:
    """What re-entering ``state`` after a pause asks for. A land already requested is not
    asked again: its outcome is still awaited through the ledger. A rollback is: production
    still carries the regression, a pending rollback was superseded by the pause, and the
    rollback adapter confirms a revert already on the base instead of reverting twice."""
    if state is S.SENSED:
        return [(E.RUN_TRIAGE, {"fingerprint": q.fingerprint})]
    if state is S.TRIAGED:
        return [] if q.route == "human" else [_agent("research", q)]
    if state is S.RESEARCHING:
        return [_agent("research", q)]
    if state is S.REPRODUCING:
        return [_agent("reproduce", q)]
    if state is S.PATCHING:
        return [_agent("patch", q, attempt=q.proof_attempts + 1)]
    if state is S.PROVING:
        return [(E.RUN_PROOF, {"head": q.patch_head, "base": q.base, "revision": q.revision})]
    if state in CHECKPOINT_STATES:
        return [_checkpoint_request(STATE_CHECKPOINT[state], policy)]
    if state is S.WATCHING:
        return [start_watch(q, policy)] if watch_started(q, policy) else []
    if state is S.ROLLED_BACK:
        return [(E.ROLLBACK, {"commit": q.landed_commit, "why": "asked again on resume"})]
    return []


def _stop_agent(q: Quest) -> list[Spec]:
    # An auto route asks for research at triage: the agent may be at work before the quest
    # says researching (its first event is research_started).
    working = q.state in AGENT_STATES or (
        q.state is S.TRIAGED and q.route in ("auto_fix", "research_only")
    )
    return [(E.STOP_AGENT, {"state": str(q.state)})] if working else []


def _dependents(q: Quest, why: str) -> list[Spec]:
    return [(E.RESUME_DEPENDENTS, {"children": list(q.children), "why": why})] if q.children else []


def _at_checkpoint(q: Quest) -> State:
    """The checkpoint state a quest is at, looking through a held review."""
    return q.resume_state if q.state is S.HANDED_OFF and q.resume_state else q.state


# --- handlers ---------------------------------------------------------------------------------


def _triage_decided(q: Quest, e: ev.TriageDecided, p: MachinePolicy) -> Outcome:
    if q.state is not S.SENSED:
        return f"triage happens once, in sensed; the quest is {q.state}"
    base = {"route": e.route, "risk": e.risk}
    if e.route == "ignore":
        until = e.at + timedelta(hours=p.mute_hours)
        return (
            {**base, "state": S.ABANDONED, "muted_until": until},
            [
                (E.MUTE_FINGERPRINT, {"fingerprint": q.fingerprint, "until": until.isoformat()}),
                *_dependents(q, "abandoned"),
            ],
        )
    if e.route == "human":
        return {**base, "state": S.TRIAGED}, [(E.NOTIFY_INBOX, {"reason": "triage_human"})]
    return {**base, "state": S.TRIAGED}, [_agent("research", q)]


def _research_started(q: Quest, e: ev.ResearchStarted, p: MachinePolicy) -> Outcome:
    if q.state is not S.TRIAGED:
        return f"research starts from triaged; the quest is {q.state}"
    if q.route == "human":
        if e.route is None:
            return "a human-routed quest needs a route (auto_fix or research_only) to start"
        return {"state": S.RESEARCHING, "route": e.route}, [_agent("research", q)]
    if e.route is not None and e.route != q.route:
        return f"the route was set by triage ({q.route}); it is not changed here"
    return {"state": S.RESEARCHING}, []


def _hypothesis_written(q: Quest, e: ev.HypothesisWritten, p: MachinePolicy) -> Outcome:
    if q.state is not S.RESEARCHING:
        return f"a hypothesis is written while researching; the quest is {q.state}"
    return (
        {"state": S.HYPOTHESISED, "hypothesis": e.summary},
        [_checkpoint_request(Checkpoint.A, p)],
    )


def _reproduction_recorded(q: Quest, e: ev.ReproductionRecorded, p: MachinePolicy) -> Outcome:
    if q.state is not S.REPRODUCING:
        return f"a reproduction is recorded while reproducing; the quest is {q.state}"
    changes: dict[str, Any] = {"state": S.PLANNED, "probe": e.probe, "plan": e.plan}
    if e.risk is not None:
        changes["risk"] = e.risk
    return changes, [_checkpoint_request(Checkpoint.B, p)]


def _reproduction_failed(q: Quest, e: ev.ReproductionFailed, p: MachinePolicy) -> Outcome:
    if q.state is not S.REPRODUCING:
        return f"only a quest that is reproducing can fail to reproduce; the quest is {q.state}"
    return (
        {"state": S.PARKED, "resume_state": S.REPRODUCING, "park_reason": "cannot_reproduce"},
        [(E.NOTIFY_INBOX, {"reason": "cannot_reproduce", "detail": e.reason})],
    )


def _patch_recorded(q: Quest, e: ev.PatchRecorded, p: MachinePolicy) -> Outcome:
    if q.state is not S.PATCHING:
        return f"a patch is recorded while patching; the quest is {q.state}"
    return (
        {"state": S.PROVING, "patch_head": e.head, "base": e.base, "approval_c": None},
        [(E.RUN_PROOF, {"head": e.head, "base": e.base, "revision": q.revision})],
    )


def _proving(q: Quest) -> bool:
    return q.state is S.PROVING or (q.state is S.HANDED_OFF and q.proof_pending)


def _proof_completed(q: Quest, e: ev.ProofCompleted, p: MachinePolicy) -> Outcome:
    if not _proving(q):
        return f"no proof is running; the quest is {q.state}"
    problem = binding_problem(
        e.bundle,
        e.digest,
        quest=q.id,
        revision=q.revision,
        risk=q.risk,
        base=q.base,
        head=q.patch_head,
        required_checks=p.required_checks.get(q.risk or "", ()),
    )
    if problem:
        return problem
    # seed: new proof invalidates an earlier C approval; a held review stays held at C.
    changes: dict[str, Any] = {"proof_digest": e.digest, "approval_c": None, "proof_pending": False}
    if q.state is S.PROVING:
        changes["state"] = S.READY
    return changes, [_checkpoint_request(Checkpoint.C, p)]


def _proof_failed(q: Quest, e: ev.ProofFailed, p: MachinePolicy) -> Outcome:
    if not _proving(q):
        return f"no proof is running; the quest is {q.state}"
    if e.bundle is not None:
        # A failure of another revision, head or base says nothing about this one.
        stale = stale_problem(
            e.bundle, quest=q.id, revision=q.revision, base=q.base, head=q.patch_head
        )
        if stale:
            return stale
        if e.digest is not None and e.digest != e.bundle.digest():
            return "proof digest does not match the canonical SHA-256 of the bundle"
    attempts = q.proof_attempts + 1
    # seed: a failed proof clears the claim before the quest moves on.
    changes: dict[str, Any] = {
        "proof_attempts": attempts,
        "proof_pending": False,
        "claim": None,
        "approval_c": None,
    }
    if attempts < p.proof_attempts:
        changes |= {"state": S.PATCHING, "resume_state": None}
        return changes, [_agent("patch", q, attempt=attempts + 1, failure=e.reason)]
    changes |= {
        "state": S.PARKED,
        "resume_state": S.PROVING,
        "park_reason": "proof_attempts_exhausted",
    }
    return changes, [(E.NOTIFY_INBOX, {"reason": "proof_attempts_exhausted", "detail": e.reason})]


def _checkpoint_decided(q: Quest, e: ev.CheckpointDecided, p: MachinePolicy) -> Outcome:
    cp = e.checkpoint
    if _at_checkpoint(q) is not CHECKPOINT_STATE[cp]:
        return f"checkpoint {cp} is not open; the quest is {q.state}"
    if q.proof_pending:
        return "proof is running for a human revision; decide when it completes"
    if cp is Checkpoint.C and q.proof_digest is None:
        return "checkpoint C needs a completed proof"
    mode = p.rule(cp).mode
    auto = e.automatic

    def record(advanced: bool, note: str = "") -> tuple[CheckpointRecord, ...]:
        return (
            *q.decisions,
            CheckpointRecord(
                checkpoint=str(cp),
                verdict=e.verdict,
                actor=e.actor,
                event=e.id,
                advanced=advanced,
                model=auto.model if auto else None,
                confidence=auto.confidence if auto else None,
                note=note,
            ),
        )

    if mode is CheckpointMode.SHADOW:
        return {"decisions": record(False, "shadow: recorded, not applied")}, []
    if cp is Checkpoint.C and e.verdict == "approve":
        failing = required_failing(q, p)
        if failing:
            # The forge's CI is the branch protection people know: a required check that
            # failed on this very head holds C until it passes or the patch changes.
            names = ", ".join(failing)
            return f"required check {names} failed on the forge for {q.patch_head}; C waits"
    if auto is not None:
        if mode is CheckpointMode.BLOCKING:
            return f"checkpoint {cp} is blocking: it waits for a person, not a model"
        threshold = p.rule(cp).thresholds.get(auto.model)
        if threshold is None:
            note = f"no threshold for model {auto.model!r}: recorded, not applied"
        elif auto.confidence < threshold:
            note = f"confidence {auto.confidence} is below {threshold}: recorded, not applied"
        elif not auto.checks or not all(c.passed for c in auto.checks):
            note = "evidence checks missing or failed: recorded, not applied"
        else:
            note = ""
        if note:
            return {"decisions": record(False, note)}, []
    changes = {"decisions": record(True), "claim": None, "resume_state": None}
    if e.verdict == "reject":
        return changes | {"state": S.ABANDONED}, _dependents(q, "abandoned")
    if e.verdict == "revise":
        target, step = REVISE_TARGET[cp]
        return changes | {"state": target, "approval_c": None}, [_agent(step, q)]
    if cp is Checkpoint.A:
        if q.route == "research_only":
            changes |= {
                "state": S.PARKED,
                "resume_state": S.HYPOTHESISED,
                "park_reason": "research_complete",
            }
            return changes, [(E.NOTIFY_INBOX, {"reason": "research_complete"})]
        return changes | {"state": S.REPRODUCING}, [_agent("reproduce", q)]
    if cp is Checkpoint.B:
        return changes | {"state": S.PATCHING}, [_agent("patch", q, attempt=q.proof_attempts + 1)]
    land = {"head": q.patch_head, "base": q.base, "proof": q.proof_digest}
    return changes | {"state": S.LANDING, "approval_c": q.proof_digest}, [(E.LAND, land)]


def _base_moved(q: Quest, e: ev.BaseMoved, p: MachinePolicy) -> Outcome:
    if e.base == q.base:
        return f"the base is already {e.base}"
    # seed: a change to the base invalidates a C approval; a proof made on the old base no
    # longer proves anything, so it is run again on the new one.
    changes: dict[str, Any] = {"base": e.base, "approval_c": None}
    state = _at_checkpoint(q)
    reprove = [(E.RUN_PROOF, {"head": q.patch_head, "base": e.base, "revision": q.revision})]
    if q.state is S.LANDING:
        changes["state"] = S.PATCHING
        return changes, [(E.REBASE, {"head": q.patch_head, "onto": e.base})]
    if q.state is S.PROVING or (q.state is S.HANDED_OFF and q.proof_pending):
        return changes, reprove
    if state is S.READY:
        changes["proof_digest"] = None
        if q.state is S.HANDED_OFF:
            return changes | {"proof_pending": True}, reprove
        return changes | {"state": S.PROVING}, reprove
    if q.state is S.PARKED and q.resume_state in {S.LANDING, S.READY}:
        # Nothing is written while parked; resuming picks the work the new base needs.
        target = S.PATCHING if q.resume_state is S.LANDING else S.PROVING
        return changes | {"resume_state": target, "proof_digest": None}, []
    return changes, []


def _landed(q: Quest, e: ev.Landed, p: MachinePolicy) -> Outcome:
    if q.state is not S.LANDING:
        return f"only a landing quest can land; the quest is {q.state}"
    if q.approval_c is None or q.approval_c != q.proof_digest:
        return "landing needs a current C approval; it was invalidated"
    watch = [(E.START_WATCH, {"commit": e.commit, "minutes": p.watch_minutes})]
    if p.watch_from is WatchStart.DEPLOYMENT:
        watch = []  # the window opens with deployment_observed
    return (
        {"state": S.WATCHING, "landed_commit": e.commit},
        [
            *watch,
            (E.REGISTER_REGRESSION_PROBE, {"probe": q.probe, "fingerprint": q.fingerprint}),
            *_dependents(q, "landed"),
        ],
    )


def _watch_clean(q: Quest, e: ev.WatchClean, p: MachinePolicy) -> Outcome:
    if q.state is not S.WATCHING:
        return f"a watch ends clean only while watching; the quest is {q.state}"
    if not watch_started(q, p):
        # A window that never opened watched the old code, not the fix.
        return f"the watch has not started: no deployment of {q.landed_commit} was observed"
    return {"state": S.CLOSED}, []


def _regression_observed(q: Quest, e: ev.RegressionObserved, p: MachinePolicy) -> Outcome:
    if q.state is not S.WATCHING:
        return f"a regression rolls back only while watching; the quest is {q.state}"
    return (
        {"state": S.ROLLED_BACK},
        [(E.ROLLBACK, {"commit": q.landed_commit, "why": e.summary})],
    )


def _reset_for_new_revision(q: Quest) -> dict[str, Any]:
    return {
        "revision": q.revision + 1,
        "patch_head": None,
        "proof_digest": None,
        "proof_attempts": 0,
        "approval_c": None,
        "landed_commit": None,
        "deployed_commit": None,
        "deployed_to": None,
        "deployed_at": None,
        "checks_head": None,
        "failing_checks": (),
        "claim": None,
        "resume_state": None,
        "park_reason": None,
    }


def _rollback_confirmed(q: Quest, e: ev.RollbackConfirmed, p: MachinePolicy) -> Outcome:
    if q.state is not S.ROLLED_BACK:
        return f"nothing is being rolled back; the quest is {q.state}"
    changes = _reset_for_new_revision(q) | {"state": S.RESEARCHING}
    return changes, [(E.START_AGENT, {"step": "research", "revision": q.revision + 1})]


def _regression_reopened(q: Quest, e: ev.RegressionReopened, p: MachinePolicy) -> Outcome:
    if q.state is not S.CLOSED:
        return f"only a closed quest is reopened by a regression; the quest is {q.state}"
    if e.signal.fingerprint != q.fingerprint:
        return f"the signal's fingerprint {e.signal.fingerprint} is not this quest's"
    floor = higher_severity(q.severity_floor, e.signal.severity)
    changes = _reset_for_new_revision(q) | {
        "state": S.RESEARCHING,
        "severity": floor,
        "severity_floor": floor,
        "signal_count": q.signal_count + 1,
        "last_signal": e.signal.id,
    }
    return changes, [(E.START_AGENT, {"step": "research", "revision": q.revision + 1})]


def _signal_merged(q: Quest, e: ev.SignalMerged, p: MachinePolicy) -> Outcome:
    if e.signal.fingerprint != q.fingerprint:
        return f"the signal's fingerprint {e.signal.fingerprint} is not this quest's"
    floor = higher_severity(q.severity_floor, e.signal.severity)
    changes: dict[str, Any] = {
        "signal_count": q.signal_count + e.count,
        "last_signal": e.signal.id,
        "severity": higher_severity(q.severity, e.signal.severity),
        "severity_floor": floor,
    }
    if _proving(q):
        changes["approval_c"] = None  # seed: a new signal during proof invalidates C
    return changes, [(E.MERGE_SIGNAL, {"signal": e.signal.id, "into": q.id})]


def _paused(q: Quest, e: ev.Paused, p: MachinePolicy) -> Outcome:
    if q.state is S.PARKED:
        return "the quest is already parked"
    return (
        {
            "state": S.PARKED,
            # A proof running under a claim is what the quest was doing: resume re-runs it.
            "resume_state": S.PROVING if q.proof_pending else _at_checkpoint(q),
            "park_reason": e.reason or "paused",
            "claim": None,
            "proof_pending": False,
        },
        _stop_agent(q),
    )


def _resumed(q: Quest, e: ev.Resumed, p: MachinePolicy) -> Outcome:
    if q.state is not S.PARKED or q.resume_state is None:
        return f"only a parked quest resumes; the quest is {q.state}"
    if q.park_reason == "waiting_for_parent":
        return f"this quest waits for its parent {q.parent} to land"
    target = q.resume_state
    changes: dict[str, Any] = {"state": target, "resume_state": None, "park_reason": None}
    if q.park_reason == "proof_attempts_exhausted":
        changes["proof_attempts"] = 0  # a person resuming grants a fresh set of attempts
        q = q.evolve(changes)
    return changes, _work_for(target, q, p)


def _parent_landed(q: Quest, e: ev.ParentLanded, p: MachinePolicy) -> Outcome:
    if q.park_reason != "waiting_for_parent" or q.parent != e.parent:
        return f"this quest is not waiting for {e.parent}"
    target = q.resume_state or S.SENSED
    changes = {"state": target, "resume_state": None, "park_reason": None}
    return changes, _work_for(target, q, p)


def _claimed(q: Quest, e: ev.Claimed, p: MachinePolicy) -> Outcome:
    if q.state is S.HANDED_OFF:
        return f"the review is already claimed by {q.claim}"
    if q.state not in CHECKPOINT_STATES:
        return f"a review can be claimed only at a checkpoint; the quest is {q.state}"
    return {"state": S.HANDED_OFF, "resume_state": q.state, "claim": e.actor}, []


def _released(q: Quest, e: ev.Released, p: MachinePolicy) -> Outcome:
    if q.state is not S.HANDED_OFF:
        return f"nothing is claimed; the quest is {q.state}"
    changes: dict[str, Any] = {"claim": None, "resume_state": None}
    if q.proof_pending:
        return changes | {"state": S.PROVING, "proof_pending": False}, []
    target = q.resume_state or S.READY
    return changes | {"state": target}, [_checkpoint_request(STATE_CHECKPOINT[target], p)]


def _killed(q: Quest, e: ev.Killed, p: MachinePolicy) -> Outcome:
    changes = {"state": S.ABANDONED, "claim": None, "park_reason": e.reason or "killed"}
    return changes, [*_stop_agent(q), *_dependents(q, "abandoned")]


def _comment_added(q: Quest, e: ev.CommentAdded, p: MachinePolicy) -> Outcome:
    specs: list[Spec] = [(E.REPLY_COMMENT, {"to": e.id})] if e.reply_requested else []
    return {"comments": q.comments + 1}, specs


_REVISABLE = frozenset({S.PATCHING, S.PROVING, S.READY, S.LANDING, S.HANDED_OFF})


def _human_revision(q: Quest, e: ev.HumanRevision, p: MachinePolicy) -> Outcome:
    if q.state not in _REVISABLE or (q.state is S.HANDED_OFF and q.resume_state is not S.READY):
        return f"a human revision applies to a patch; the quest is {q.state}"
    if q.patch_head is None or q.base is None:
        return "no patch is recorded yet: a person's first patch is a patch_recorded event"
    if e.head == q.patch_head:
        # Same head: the approval still stops counting, and C is asked again.
        if q.state is S.LANDING:
            return {"state": S.READY, "approval_c": None}, [_checkpoint_request(Checkpoint.C, p)]
        return {"approval_c": None}, []
    revision = q.revision + 1
    changes: dict[str, Any] = {
        "revision": revision,
        "patch_head": e.head,
        "proof_digest": None,
        "proof_attempts": 0,
        "approval_c": None,
    }
    if q.state is S.HANDED_OFF:
        changes["proof_pending"] = True
    else:
        changes["state"] = S.PROVING
    return changes, [(E.RUN_PROOF, {"head": e.head, "base": q.base, "revision": revision})]


def _probes_requested(q: Quest, e: ev.ProbesRequested, p: MachinePolicy) -> Outcome:
    if q.state not in {S.REPRODUCING, S.PROVING, S.WATCHING}:
        return f"probes run while reproducing, proving or watching; the quest is {q.state}"
    return {}, [(E.RUN_PROBES, {"probes": list(e.probes)})]


def _child_attached(q: Quest, e: ev.ChildAttached, p: MachinePolicy) -> Outcome:
    if e.child in q.children:
        return f"{e.child} is already a dependent of this quest"
    return {"children": (*q.children, e.child)}, []


def _spend_requested(q: Quest, e: ev.SpendRequested, p: MachinePolicy) -> Outcome:
    if q.state not in {S.RESEARCHING, S.REPRODUCING}:
        return f"a study is paid for during research or reproduction; the quest is {q.state}"
    if q.pending_spend is not None:
        return f"spend request {q.pending_spend} is still waiting for a decision"
    payload = {"request": e.request, "amount_micros": e.amount_micros, "purpose": e.purpose}
    return {"pending_spend": e.request}, [(E.REQUEST_SPEND, payload)]


def _spend_decided(q: Quest, e: ev.SpendDecided, p: MachinePolicy) -> Outcome:
    if q.pending_spend != e.request:
        return f"no spend request {e.request} is pending"
    specs: list[Spec] = [(E.START_RESPONDENT_RUN, {"request": e.request})] if e.approved else []
    return {"pending_spend": None}, specs


def _usage_recorded(q: Quest, e: ev.UsageRecorded, p: MachinePolicy) -> Outcome:
    u = q.usage
    usage = _tuple_new(
        Usage,
        (
            u.receipts + 1,
            u.cost_micros + e.cost_micros,
            u.tokens + e.tokens,
            u.runner_seconds + e.runner_seconds,
        ),
    )
    return {"usage": usage}, _NO_EFFECTS


_tuple_new = tuple.__new__
_NO_EFFECTS: list[Spec] = []  # shared and never mutated: the machine only reads specs


Handler = Callable[[Quest, Any, MachinePolicy], Outcome]

HANDLERS: dict[str, Handler] = {
    "triage_decided": _triage_decided,
    "research_started": _research_started,
    "hypothesis_written": _hypothesis_written,
    "checkpoint_decided": _checkpoint_decided,
    "reproduction_recorded": _reproduction_recorded,
    "reproduction_failed": _reproduction_failed,
    "patch_recorded": _patch_recorded,
    "patch_failed": patch_failed,
    "proof_completed": _proof_completed,
    "proof_failed": _proof_failed,
    "probes_requested": _probes_requested,
    "base_moved": _base_moved,
    "landed": _landed,
    "landing_failed": landing_failed,
    "deployment_observed": deployment_observed,
    "checks_reported": checks_reported,
    "watch_clean": _watch_clean,
    "regression_observed": _regression_observed,
    "rollback_confirmed": _rollback_confirmed,
    "rollback_failed": rollback_failed,
    "regression_reopened": _regression_reopened,
    "signal_merged": _signal_merged,
    "paused": _paused,
    "resumed": _resumed,
    "claimed": _claimed,
    "released": _released,
    "killed": _killed,
    "comment_added": _comment_added,
    "human_revision": _human_revision,
    "child_attached": _child_attached,
    "parent_landed": _parent_landed,
    "spend_requested": _spend_requested,
    "spend_decided": _spend_decided,
    "usage_recorded": _usage_recorded,
}
