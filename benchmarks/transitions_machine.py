"""The benchmark's quest machine written with the ``transitions`` library (``transitions.Machine``).

One ``Machine`` holds the states and transitions; each quest is a model added with
``add_model`` when its ``signal_sensed`` arrives. Guards are transition ``conditions`` (the
checkpoint being decided is the open one, proof attempts remain, the proof bundle binds, the C
approval is current); pausing saves the state in a ``before`` callback and resuming is one
conditional transition per state it can return to. Callbacks collect the effects, which the
loop keys exactly as ``ephyra.core.machine`` does. It covers the events ``benchmarks/fold.py``
sends; anything else is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from transitions import EventData, Machine, MachineError

from benchmarks.records import AGENT_STATES, CHECKPOINT_OF, Step, keyed
from ephyra.core.proof import binding_problem

STATES = [
    "new", "sensed", "triaged", "researching", "hypothesised", "reproducing", "planned",
    "patching", "proving", "ready", "landing", "watching", "closed", "rolled_back", "parked",
    "handed_off", "abandoned",
]  # fmt: skip
TERMINAL = ("closed", "abandoned")
LIVE = [s for s in STATES if s not in TERMINAL and s != "new"]
PAUSABLE = [s for s in LIVE if s != "parked"]


class Folded(NamedTuple):
    quests: dict[str, Quest]
    decisions: list[Step]


class Quest:
    """The model: quest fields, the conditions and the callbacks that record effects."""

    def __init__(self, e: Any, policy: Any) -> None:
        self.id, self.policy, self.revision = e.quest, policy, 1
        self.fingerprint, self.severity = e.signal.fingerprint, e.signal.severity
        self.route = self.risk = self.resume_state = self.park_reason = None
        self.base = self.patch_head = self.proof_digest = self.approval_c = None
        self.landed_commit = None
        self.hypothesis = self.probe = self.plan = ""
        self.decisions: list[tuple[str, str, str, str]] = []
        self.proof_attempts = self.comments = 0
        self.receipts = self.cost_micros = self.tokens = self.runner_seconds = 0
        self.updated_at, self.last_event = e.at, e.id
        self.specs: list[tuple[str, dict[str, Any]]] = []

    # --- conditions ---------------------------------------------------------------------------

    def routed_to_agent(self, ed: EventData) -> bool:
        return ed.args[0].route == "auto_fix"

    def keeps_route(self, ed: EventData) -> bool:
        return ed.args[0].route in (None, self.route)

    def approves_checkpoint(self, ed: EventData) -> bool:
        e = ed.args[0]
        return (
            e.checkpoint == CHECKPOINT_OF[self.state]
            and e.verdict == "approve"
            and not (e.automatic)
        )

    def has_attempts(self, ed: EventData) -> bool:
        return self.proof_attempts + 1 < self.policy.proof_attempts

    def proof_binds(self, ed: EventData) -> bool:
        e = ed.args[0]
        return None is binding_problem(
            e.bundle, e.digest, quest=self.id, revision=self.revision, risk=self.risk,
            base=self.base, head=self.patch_head,
            required_checks=self.policy.required_checks.get(self.risk or "", ()),
        )  # fmt: skip

    def approval_current(self, ed: EventData) -> bool:
        return self.approval_c == self.proof_digest

    # --- callbacks ----------------------------------------------------------------------------

    def _agent(self, step: str, **extra: Any) -> None:
        self.specs.append(("start_agent", {"step": step, "revision": self.revision, **extra}))

    def _checkpoint(self) -> None:
        cp = CHECKPOINT_OF[self.state]
        mode = self.policy.rule(cp).mode
        payload = {"checkpoint": cp, "mode": str(mode), "blocking": mode == "blocking"}
        self.specs.append(("request_checkpoint", payload))

    def _proof(self) -> None:
        payload = {"head": self.patch_head, "base": self.base, "revision": self.revision}
        self.specs.append(("run_proof", payload))

    def do_created(self, ed: EventData) -> None:
        self.specs.append(("run_triage", {"fingerprint": self.fingerprint}))

    def do_triaged(self, ed: EventData) -> None:
        self.route, self.risk = ed.args[0].route, ed.args[0].risk
        self._agent("research")

    def do_hypothesis(self, ed: EventData) -> None:
        self.hypothesis = ed.args[0].summary
        self._checkpoint()

    def do_approved(self, ed: EventData) -> None:
        e = ed.args[0]
        self.decisions.append((str(e.checkpoint), e.verdict, e.actor, e.id))
        self.resume_state = None
        if self.state == "reproducing":
            self._agent("reproduce")
        elif self.state == "patching":
            self._agent("patch", attempt=self.proof_attempts + 1)
        else:
            self.approval_c = self.proof_digest
            land = {"head": self.patch_head, "base": self.base, "proof": self.proof_digest}
            self.specs.append(("land", land))

    def do_reproduction(self, ed: EventData) -> None:
        e = ed.args[0]
        self.probe, self.plan = e.probe, e.plan
        if e.risk is not None:
            self.risk = e.risk
        self._checkpoint()

    def do_patch(self, ed: EventData) -> None:
        e = ed.args[0]
        self.patch_head, self.base, self.approval_c = e.head, e.base, None
        self._proof()

    def do_retry(self, ed: EventData) -> None:
        self.proof_attempts += 1
        self.approval_c = None
        self._agent("patch", attempt=self.proof_attempts + 1, failure=ed.args[0].reason)

    def do_exhausted(self, ed: EventData) -> None:
        self.proof_attempts += 1
        self.approval_c = None
        self.resume_state, self.park_reason = "proving", "proof_attempts_exhausted"
        payload = {"reason": "proof_attempts_exhausted", "detail": ed.args[0].reason}
        self.specs.append(("notify_inbox", payload))

    def do_proven(self, ed: EventData) -> None:
        self.proof_digest, self.approval_c = ed.args[0].digest, None
        self._checkpoint()

    def do_landed(self, ed: EventData) -> None:
        self.landed_commit = ed.args[0].commit
        minutes = self.policy.watch_minutes
        self.specs.append(("start_watch", {"commit": self.landed_commit, "minutes": minutes}))
        probe = {"probe": self.probe, "fingerprint": self.fingerprint}
        self.specs.append(("register_regression_probe", probe))

    def do_pause(self, ed: EventData) -> None:  # before: the state is still the one paused
        self.resume_state, self.park_reason = self.state, ed.args[0].reason or "paused"
        if self.state in AGENT_STATES:
            self.specs.append(("stop_agent", {"state": self.state}))

    def do_resume(self, ed: EventData) -> None:
        self.resume_state = self.park_reason = None
        s = self.state
        if s == "sensed":
            self.specs.append(("run_triage", {"fingerprint": self.fingerprint}))
        elif s in ("triaged", "researching"):
            self._agent("research")
        elif s == "reproducing":
            self._agent("reproduce")
        elif s == "patching":
            self._agent("patch", attempt=self.proof_attempts + 1)
        elif s == "proving":
            self._proof()
        elif s in CHECKPOINT_OF:
            self._checkpoint()
        elif s == "watching":
            minutes = self.policy.watch_minutes
            self.specs.append(("start_watch", {"commit": self.landed_commit, "minutes": minutes}))

    def do_usage(self, ed: EventData) -> None:
        e = ed.args[0]
        self.receipts += 1
        self.cost_micros += e.cost_micros
        self.tokens += e.tokens
        self.runner_seconds += e.runner_seconds

    def do_comment(self, ed: EventData) -> None:
        self.comments += 1
        if ed.args[0].reply_requested:
            self.specs.append(("reply_comment", {"to": ed.args[0].id}))

    def do_touch(self, ed: EventData) -> None:  # after every transition, internal ones too
        self.updated_at, self.last_event = ed.args[0].at, ed.args[0].id


def _resumes_to(state: str) -> Callable[[EventData], bool]:
    return lambda ed: ed.model.resume_state == state


def _t(trigger: str, source: Any, dest: str | None, **kw: Any) -> dict[str, Any]:
    return {"trigger": trigger, "source": source, "dest": dest, **kw}


TRANSITIONS = [
    _t("signal_sensed", "new", "sensed", after="do_created"),
    _t("triage_decided", "sensed", "triaged", conditions="routed_to_agent", after="do_triaged"),
    _t("research_started", "triaged", "researching", conditions="keeps_route"),
    _t("hypothesis_written", "researching", "hypothesised", after="do_hypothesis"),
    *(
        _t("checkpoint_decided", src, dst, conditions="approves_checkpoint", after="do_approved")
        for src, dst in (
            ("hypothesised", "reproducing"),
            ("planned", "patching"),
            ("ready", "landing"),
        )
    ),
    _t("reproduction_recorded", "reproducing", "planned", after="do_reproduction"),
    _t("patch_recorded", "patching", "proving", after="do_patch"),
    _t("proof_failed", "proving", "patching", conditions="has_attempts", after="do_retry"),
    _t("proof_failed", "proving", "parked", unless="has_attempts", after="do_exhausted"),
    _t("proof_completed", "proving", "ready", conditions="proof_binds", after="do_proven"),
    _t("landed", "landing", "watching", conditions="approval_current", after="do_landed"),
    _t("watch_clean", "watching", "closed"),
    _t("paused", PAUSABLE, "parked", before="do_pause"),
    *(
        _t("resumed", "parked", s, conditions=_resumes_to(s), after="do_resume")
        for s in PAUSABLE
        if s != "handed_off"
    ),
    _t("usage_recorded", "*", None, after="do_usage"),
    _t("comment_added", LIVE, None, after="do_comment"),
]


def build_machine() -> Machine:
    return Machine(
        model=None,
        states=STATES,
        transitions=TRANSITIONS,
        initial="new",
        send_event=True,
        auto_transitions=False,
        after_state_change="do_touch",
    )


def fold(events: Iterable[Any], policy: Any) -> Folded:
    machine = build_machine()
    events_known = machine.events
    quests: dict[str, Quest] = {}
    decisions: list[Step] = []
    append = decisions.append
    for e in events:
        etype = e.type
        q = quests.get(e.quest)
        if q is None:
            if etype != "signal_sensed":
                append(Step(e.quest, e.id, etype, "refused", None, None, 0, (), "no quest"))
                continue
            q = quests[e.quest] = Quest(e, policy)
            machine.add_model(q)
            before = None
        else:
            before = q.state
        q.specs = []
        try:
            ok = etype in events_known and getattr(q, etype)(e)
        except MachineError:  # no transition for this event from this state
            ok = False
        if not ok:
            append(Step(q.id, e.id, etype, "refused", before, before, q.revision, (), "refused"))
            continue
        effects = keyed(q.id, q.revision, e.id, q.specs)
        append(Step(q.id, e.id, etype, "accepted", before, q.state, q.revision, effects))
    return Folded(quests, decisions)
