"""The benchmark's quest machine as a hand-written dict table.

``TABLE[(state, event_type)] -> (next_state, effects)`` plus the few lines a person would add for
the guards, pause/resume and proof attempts. Quests are mutable objects changed in place. It
covers the events ``benchmarks/fold.py`` sends and produces the same effect keys and payloads
as ``ephyra.core.machine.fold``; anything outside its table is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from benchmarks.records import AGENT_STATES, CHECKPOINT_OF, Step, keyed
from ephyra.core.proof import binding_problem

STATES = [
    "sensed", "triaged", "researching", "hypothesised", "reproducing", "planned", "patching",
    "proving", "ready", "landing", "watching", "closed", "rolled_back", "parked", "handed_off",
    "abandoned",
]  # fmt: skip
TERMINAL = frozenset({"closed", "abandoned"})


class Folded(NamedTuple):
    quests: dict[str, Quest]
    decisions: list[Step]


class Quest:
    __slots__ = (
        "approval_c", "base", "comments", "cost_micros", "decisions", "fingerprint", "hypothesis",
        "id", "landed_commit", "last_event", "park_reason", "patch_head", "plan", "probe",
        "proof_attempts", "proof_digest", "receipts", "resume_state", "revision", "risk", "route",
        "runner_seconds", "severity", "state", "tokens", "updated_at",
    )  # fmt: skip

    def __init__(self, e: Any) -> None:
        self.id, self.state, self.revision = e.quest, "sensed", 1
        self.fingerprint, self.severity = e.signal.fingerprint, e.signal.severity
        self.route = self.risk = self.resume_state = self.park_reason = None
        self.base = self.patch_head = self.proof_digest = self.approval_c = None
        self.landed_commit = None
        self.hypothesis = self.probe = self.plan = ""
        self.decisions: list[tuple[str, str, str, str]] = []
        self.proof_attempts = self.comments = 0
        self.receipts = self.cost_micros = self.tokens = self.runner_seconds = 0
        self.updated_at, self.last_event = e.at, e.id


def _checkpoint(q: Quest, e: Any, p: Any) -> dict[str, Any]:
    mode = p.rule(CHECKPOINT_OF[q.state]).mode
    return {"checkpoint": CHECKPOINT_OF[q.state], "mode": str(mode), "blocking": mode == "blocking"}


# Effect name -> (effect type, payload builder). Builders see the quest after the transition.
Builder = Callable[[Quest, Any, Any], dict[str, Any]]
BUILD: dict[str, tuple[str, Builder]] = {
    "triage": ("run_triage", lambda q, e, p: {"fingerprint": q.fingerprint}),
    "research": ("start_agent", lambda q, e, p: {"step": "research", "revision": q.revision}),
    "reproduce": ("start_agent", lambda q, e, p: {"step": "reproduce", "revision": q.revision}),
    "patch": (
        "start_agent",
        lambda q, e, p: {"step": "patch", "revision": q.revision, "attempt": q.proof_attempts + 1},
    ),
    "retry": (
        "start_agent",
        lambda q, e, p: {
            "step": "patch",
            "revision": q.revision,
            "attempt": q.proof_attempts + 1,
            "failure": e.reason,
        },
    ),
    "checkpoint": ("request_checkpoint", _checkpoint),
    "proof": (
        "run_proof",
        lambda q, e, p: {"head": q.patch_head, "base": q.base, "revision": q.revision},
    ),
    "land": (
        "land",
        lambda q, e, p: {"head": q.patch_head, "base": q.base, "proof": q.proof_digest},
    ),
    "watch": (
        "start_watch",
        lambda q, e, p: {"commit": q.landed_commit, "minutes": p.watch_minutes},
    ),
    "probe": (
        "register_regression_probe",
        lambda q, e, p: {"probe": q.probe, "fingerprint": q.fingerprint},
    ),
    "stop": ("stop_agent", lambda q, e, p: {"state": q.resume_state}),
    "reply": ("reply_comment", lambda q, e, p: {"to": e.id}),
    "exhausted": (
        "notify_inbox",
        lambda q, e, p: {"reason": "proof_attempts_exhausted", "detail": e.reason},
    ),
}

Row = tuple[str | None, tuple[str, ...]]  # next state (None: stays), effect names
TABLE: dict[tuple[str, str], Row] = {
    ("sensed", "triage_decided"): ("triaged", ("research",)),
    ("triaged", "research_started"): ("researching", ()),
    ("researching", "hypothesis_written"): ("hypothesised", ("checkpoint",)),
    ("hypothesised", "checkpoint_decided"): ("reproducing", ("reproduce",)),
    ("reproducing", "reproduction_recorded"): ("planned", ("checkpoint",)),
    ("planned", "checkpoint_decided"): ("patching", ("patch",)),
    ("patching", "patch_recorded"): ("proving", ("proof",)),
    ("proving", "proof_failed"): ("patching", ("retry",)),
    ("proving", "proof_completed"): ("ready", ("checkpoint",)),
    ("ready", "checkpoint_decided"): ("landing", ("land",)),
    ("landing", "landed"): ("watching", ("watch", "probe")),
    ("watching", "watch_clean"): ("closed", ()),
    **{(s, "usage_recorded"): (None, ()) for s in STATES},
    **{(s, "comment_added"): (None, ("reply",)) for s in STATES if s not in TERMINAL},
}
# What re-entering a state after a pause asks for.
WORK = {
    "sensed": ("triage",), "triaged": ("research",), "researching": ("research",),
    "reproducing": ("reproduce",), "patching": ("patch",), "proving": ("proof",),
    "hypothesised": ("checkpoint",), "planned": ("checkpoint",), "ready": ("checkpoint",),
    "watching": ("watch",),
}  # fmt: skip


def _guard_checkpoint(q: Quest, e: Any, p: Any) -> str | None:
    if e.checkpoint != CHECKPOINT_OF[q.state] or e.verdict != "approve" or e.automatic:
        return "only a person's approval of the open checkpoint is in this table"
    return None


def _guard_proof(q: Quest, e: Any, p: Any) -> str | None:
    return binding_problem(
        e.bundle, e.digest, quest=q.id, revision=q.revision, risk=q.risk, base=q.base,
        head=q.patch_head, required_checks=p.required_checks.get(q.risk or "", ()),
    )  # fmt: skip


GUARDS: dict[str, Callable[[Quest, Any, Any], str | None]] = {
    "triage_decided": lambda q, e, p: None if e.route == "auto_fix" else "route not in table",
    "research_started": lambda q, e, p: None if e.route in (None, q.route) else "route changed",
    "checkpoint_decided": _guard_checkpoint,
    "proof_completed": _guard_proof,
    "landed": lambda q, e, p: None if q.approval_c == q.proof_digest else "no current approval",
}


def _checkpoint_decided(q: Quest, e: Any) -> None:
    q.decisions.append((str(e.checkpoint), e.verdict, e.actor, e.id))
    q.resume_state = None
    if e.checkpoint == "C":
        q.approval_c = q.proof_digest


def _usage(q: Quest, e: Any) -> None:
    q.receipts += 1
    q.cost_micros += e.cost_micros
    q.tokens += e.tokens
    q.runner_seconds += e.runner_seconds


def _proof_failed(q: Quest, e: Any) -> None:
    q.proof_attempts += 1
    q.approval_c = None


def _proof_completed(q: Quest, e: Any) -> None:
    q.proof_digest, q.approval_c = e.digest, None


def _patch(q: Quest, e: Any) -> None:
    q.patch_head, q.base, q.approval_c = e.head, e.base, None


def _reproduction(q: Quest, e: Any) -> None:
    q.probe, q.plan = e.probe, e.plan
    if e.risk is not None:
        q.risk = e.risk


def _triage(q: Quest, e: Any) -> None:
    q.route, q.risk = e.route, e.risk


def _hypothesis(q: Quest, e: Any) -> None:
    q.hypothesis = e.summary


def _landed(q: Quest, e: Any) -> None:
    q.landed_commit = e.commit


def _comment(q: Quest, e: Any) -> None:
    q.comments += 1


UPDATES: dict[str, Callable[[Quest, Any], None]] = {
    "triage_decided": _triage,
    "hypothesis_written": _hypothesis,
    "checkpoint_decided": _checkpoint_decided,
    "reproduction_recorded": _reproduction,
    "patch_recorded": _patch,
    "proof_failed": _proof_failed,
    "proof_completed": _proof_completed,
    "landed": _landed,
    "comment_added": _comment,
    "usage_recorded": _usage,
}


def fold(events: Iterable[Any], policy: Any) -> Folded:
    quests: dict[str, Quest] = {}
    decisions: list[Step] = []
    append = decisions.append
    for e in events:
        etype = e.type
        q = quests.get(e.quest)
        reason = None
        if q is None:
            if etype != "signal_sensed":
                append(Step(e.quest, e.id, etype, "refused", None, None, 0, (), "no quest"))
                continue
            q = quests[e.quest] = Quest(e)
            before, names = None, ("triage",)
        else:
            before = q.state
            if etype == "paused":
                reason = "cannot pause" if before in TERMINAL or before == "parked" else None
                names = ()
            elif etype == "resumed":
                reason = None if before == "parked" and q.resume_state else "not parked"
            else:
                row = TABLE.get((before, etype))
                if row is None:
                    reason = f"{etype} is not taken in {before}"
                elif guard := GUARDS.get(etype):
                    reason = guard(q, e, policy)
            if reason is not None:
                append(Step(q.id, e.id, etype, "refused", before, before, q.revision, (), reason))
                continue
            if etype == "paused":
                q.state, q.resume_state, q.park_reason = "parked", before, e.reason or "paused"
                if before in AGENT_STATES:
                    names = ("stop",)
            elif etype == "resumed":
                q.state, q.resume_state, q.park_reason = q.resume_state, None, None
                names = WORK.get(q.state, ())
            else:
                nxt, names = row  # type: ignore[misc]
                if etype == "proof_failed" and q.proof_attempts + 1 >= policy.proof_attempts:
                    nxt, names = "parked", ("exhausted",)
                    q.resume_state, q.park_reason = "proving", "proof_attempts_exhausted"
                elif etype == "comment_added" and not e.reply_requested:
                    names = ()
                update = UPDATES.get(etype)
                if update is not None:
                    update(q, e)
                if nxt is not None:
                    q.state = nxt
            q.updated_at, q.last_event = e.at, e.id
        specs = [(BUILD[n][0], BUILD[n][1](q, e, policy)) for n in names]
        effects = keyed(q.id, q.revision, e.id, specs)
        append(Step(q.id, e.id, etype, "accepted", before, q.state, q.revision, effects))
    return Folded(quests, decisions)
