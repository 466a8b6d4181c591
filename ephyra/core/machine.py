"""The quest lifecycle machine: ``decide(quest, event, policy)`` and ``fold(events, policy)``.

``decide`` is pure and deterministic. It returns a ``Decision`` holding the next quest and the
effects to carry out, or a refusal that leaves the quest exactly as it was. The per-event rules
live in ``ephyra.core.lifecycle``; this module adds what holds for every event: creation,
terminal absorption, the claim guard, effect keys and folding.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from ephyra.core import events as ev
from ephyra.core.effects import Effect, EffectType
from ephyra.core.lifecycle import HANDLERS, Spec
from ephyra.core.quest import Quest
from ephyra.core.rules import DEFAULT_POLICY, MachinePolicy
from ephyra.core.states import (
    TERMINAL,
    State,
)

MACHINE_VERSION = "1"
_tuple_new = tuple.__new__
# Enum attribute and .value lookups are Python-level descriptors; plain dicts are not.
_NAME = {t: t.value for t in EffectType}
_HANDED_OFF = State.HANDED_OFF

ACCEPTED = "accepted"
REFUSED = "refused"
ABSORBED = "absorbed"

S = State
E = EffectType


class Decision(NamedTuple):
    quest: Quest | None
    quest_id: str
    event_id: str
    event_type: str
    outcome: str
    state_before: State | None
    state: State | None
    revision: int
    effects: tuple[Effect, ...]
    reason: str | None = None

    @property
    def accepted(self) -> bool:
        return self.outcome == ACCEPTED

    def to_dict(self) -> dict[str, Any]:
        return {
            "quest": self.quest_id,
            "event": self.event_id,
            "type": self.event_type,
            "outcome": self.outcome,
            "from": None if self.state_before is None else str(self.state_before),
            "state": None if self.state is None else str(self.state),
            "revision": self.revision,
            "effects": [e.key for e in self.effects],
            "reason": self.reason,
        }


class FoldResult(NamedTuple):
    quests: dict[str, Quest]
    decisions: list[Decision]
    first_invalid: Decision | None

    @property
    def quest(self) -> Quest | None:
        """The final quest when the events concern exactly one quest."""
        if len(self.quests) > 1:
            raise ValueError("these events concern several quests: read .quests")
        return next(iter(self.quests.values()), None)


# Events a terminal quest still takes (seed: late costs are not lost; a regression reopens).
_AFTER_TERMINAL = {
    S.CLOSED: {"usage_recorded", "regression_reopened"},
    S.ABANDONED: {"usage_recorded"},
}
# While a review is held, only its holder acts; these still arrive from anyone (or anything).
_DURING_CLAIM = frozenset(
    {
        "comment_added",
        "usage_recorded",
        "signal_merged",
        "child_attached",
        "proof_completed",
        "proof_failed",
        "base_moved",
        "checks_reported",
        "claimed",
    }
)
# The engine's own automatic decisions come from a model, not from the holder.


# --- the machine -----------------------------------------------------------------------------


def _create(event: ev.SignalSensed) -> tuple[Quest, list[Spec]]:
    s = event.signal
    base = {
        "id": event.quest,
        "fingerprint": s.fingerprint,
        "severity": s.severity,
        "severity_floor": s.severity,
        "created_at": event.at,
        "updated_at": event.at,
        "title": s.title,
        "last_signal": s.id,
    }
    if event.parent is None:
        return Quest(state=S.SENSED, **base), [(E.RUN_TRIAGE, {"fingerprint": s.fingerprint})]
    child = Quest(
        state=S.PARKED,
        resume_state=S.SENSED,
        park_reason="waiting_for_parent",
        parent=event.parent,
        **base,
    )
    payload = {"parent": event.parent, "child": event.quest, "signal": s.model_dump(mode="json")}
    return child, [(E.DELIVER_CHILD_EVIDENCE, payload)]


def _refuse(quest: Quest | None, event: ev.BaseEvent, reason: str, outcome: str = REFUSED):
    state = None if quest is None else quest.state
    revision = 0 if quest is None else quest.revision
    return Decision(
        quest, event.quest, event.id, event.type, outcome, state, state, revision, (), reason
    )


def decide(
    quest: Quest | None, event: ev.BaseEvent, policy: MachinePolicy = DEFAULT_POLICY
) -> Decision:
    """Apply one event. A refused or absorbed event returns the quest unchanged, no effects."""
    etype = event.type  # type: ignore[attr-defined]
    if quest is None:
        if etype != "signal_sensed":
            return _refuse(None, event, f"no quest {event.quest}: the first event is signal_sensed")
        new, specs = _create(event)  # type: ignore[arg-type]
        before = None
    else:
        if quest.id != event.quest:
            return _refuse(quest, event, f"this event is for quest {event.quest}, not {quest.id}")
        state = quest.state
        if etype == "signal_sensed":
            return _refuse(quest, event, f"quest {quest.id} already exists")
        if state in TERMINAL and etype not in _AFTER_TERMINAL[state]:
            return _refuse(quest, event, f"the quest is {state}: absorbed", ABSORBED)
        if state is _HANDED_OFF and etype not in _DURING_CLAIM and event.actor != quest.claim:
            return _refuse(
                quest, event, f"the review is claimed by {quest.claim}; only they can act now"
            )
        result = HANDLERS[etype](quest, event, policy)
        if type(result) is str:
            return _refuse(quest, event, result)
        changes, specs = result  # type: ignore[misc]
        new = quest.advance(changes, event.at, event.id)
        before = state
    if not specs:
        effects: tuple[Effect, ...] = ()
    else:
        effects = _keyed(new.id, new.revision, event.id, specs)
    # tuple.__new__ skips the named tuple's Python-level __new__: this runs once per event.
    return _tuple_new(
        Decision,
        (new, new.id, event.id, etype, ACCEPTED, before, new.state, new.revision, effects, None),
    )


def _keyed(trail: str, rev: int, event_id: str, specs: list[Spec]) -> tuple[Effect, ...]:
    prefix = f"{trail}:{rev}:"
    if len(specs) == 1:  # the common case: one effect, occurrence 0
        etype, payload = specs[0]
        return (_tuple_new(Effect, (f"{prefix}{_NAME[etype]}:{event_id}:0", etype, payload)),)
    seen: dict[EffectType, int] = {}
    out = []
    for etype, payload in specs:
        n = seen.get(etype, 0)
        seen[etype] = n + 1
        out.append(Effect(f"{prefix}{_NAME[etype]}:{event_id}:{n}", etype, payload))
    return tuple(out)


def reused_id(quest: Quest | None, event: ev.BaseEvent, earlier_type: str, where: str) -> Decision:
    """The refusal of an event whose id the quest already used for another event (its type
    and where it is: a position in a fold, a commit in a journal). An event id is part of every
    effect key its event asks for, so two events under one id would share keys."""
    return _refuse(
        quest,
        event,
        f"the event id {event.id} is already used by {earlier_type} ({where}): "
        "a quest takes each event id once",
    )


def redelivered(quest: Quest | None, event: ev.BaseEvent, where: str) -> Decision:
    """The answer of a fold to an exact copy of an event it already took: absorbed, nothing
    changes (the engine answers the same copy with the decision its journal recorded)."""
    etype = event.type  # type: ignore[attr-defined]
    reason = f"event {event.id} ({etype}) was already taken ({where}): a redelivery changes nothing"
    return _refuse(quest, event, reason, ABSORBED)


def fold(events: Iterable[ev.BaseEvent], policy: MachinePolicy = DEFAULT_POLICY) -> FoldResult:
    """Run events through the machine in order; events may concern several quests.

    Each quest takes an event id once, as the journal does: an event whose id an accepted
    event of the same quest already used is refused naming it (``reused_id``), or absorbed
    when it is an exact copy of that event (``redelivered``). The ids are kept in memory, one
    dictionary per quest, so the check costs a lookup, not a scan of the events before."""
    quests: dict[str, Quest] = {}
    decisions: list[Decision] = []
    first_invalid: Decision | None = None
    taken: dict[str, dict[str, tuple[int, ev.BaseEvent]]] = {}  # quest -> id -> (position, event)
    get = quests.get
    for position, event in enumerate(events, start=1):
        ids = taken.get(event.quest)
        earlier = None if ids is None else ids.get(event.id)
        if earlier is None:
            decision = decide(get(event.quest), event, policy)
        else:
            decision = _taken_again(get(event.quest), event, *earlier)
        decisions.append(decision)
        if decision.outcome == ACCEPTED:
            quests[decision.quest_id] = decision.quest  # type: ignore[assignment]
            if ids is None:
                ids = taken[event.quest] = {}
            ids[event.id] = (position, event)
        elif first_invalid is None and decision.outcome == REFUSED:
            first_invalid = decision
    return FoldResult(quests, decisions, first_invalid)


def _taken_again(
    quest: Quest | None, event: ev.BaseEvent, position: int, earlier: ev.BaseEvent
) -> Decision:
    where = f"position {position}"
    # Compared as JSON, as the journal compares event.json: a proof bundle's JSON holds only
    # the fields it was given, which model equality does not look at.
    if ev.event_to_dict(earlier) == ev.event_to_dict(event):
        return redelivered(quest, event, where)
    return reused_id(quest, event, earlier.type, where)  # type: ignore[attr-defined]
