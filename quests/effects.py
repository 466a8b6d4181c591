"""Built-in effect adapters about quests themselves: the inbox, merged signals, and conflict
children waiting for their parent (``ephyra/compose.py`` registers them).

Each returns the events its outcome feeds back, with ids derived from the ledger key, so a
second feeding after a crash is recognised as a redelivery.
"""

from __future__ import annotations

from django.utils import timezone

from ephyra.core.events import ChildAttached, ParentLanded, SignalRef
from ephyra.core.ports import EffectFailed, EffectRequest, EffectResult, outcome_event_id
from ephyra.core.states import State
from quests.models import Quest


class NotifyInboxAdapter:
    """``notify_inbox``: the inbox lists quests waiting for people from the projection, so the
    notification is recorded here and shown there; nothing leaves Ephyra yet."""

    def run(self, request: EffectRequest) -> EffectResult:
        return EffectResult("succeeded", {"reason": request.payload.get("reason", "")})

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None


class RequestCheckpointAdapter:
    """``request_checkpoint``: a quest waits at A, B or C. The inbox lists it from the
    projection (the quest's state says which checkpoint), so the request is recorded here and
    answered there by a person. An advisory or shadow checkpoint waits for a person too until
    a model evaluation is configured (none is built in): nothing decides in their place."""

    def run(self, request: EffectRequest) -> EffectResult:
        detail = {key: request.payload.get(key) for key in ("checkpoint", "mode", "blocking")}
        return EffectResult("succeeded", {**detail, "waits_for": "a person"})

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None


class MergeSignalAdapter:
    """``merge_signal``: the engine already counted the signal on the quest and intake keeps
    the signal row; nothing outside Ephyra is told."""

    def run(self, request: EffectRequest) -> EffectResult:
        return EffectResult("succeeded", dict(request.payload))

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None


# A parent in these states will never ask for ``resume_dependents`` about a new child: its
# patch landed already (watching, closed) or it is gone (abandoned). The child is let go now.
_NOTHING_TO_WAIT_FOR = frozenset({State.WATCHING, State.CLOSED, State.ABANDONED})


class DeliverChildEvidenceAdapter:
    """``deliver_child_evidence`` (asked by a conflict child when it is created): the parent
    records the child (``child_attached``), so it asks for ``resume_dependents`` when it lands
    or is abandoned. If the parent has nothing left to land, the child is released at once
    (``parent_landed``) instead of waiting for a parent that will never call it."""

    def run(self, request: EffectRequest) -> EffectResult:
        parent, child = request.payload["parent"], request.payload["child"]
        state = (
            Quest.objects.filter(workspace__slug=request.workspace, quest_id=parent)
            .values_list("state", flat=True)
            .first()
        )
        at = timezone.now()
        event_id = outcome_event_id(request.key, 0)
        if state is None or State(state) in _NOTHING_TO_WAIT_FOR:
            released = ParentLanded(
                id=event_id, quest=child, at=at, actor="ephyra:dependents", parent=parent
            )
            detail = {"parent": parent, "parent_state": state, "released": True}
            return EffectResult("succeeded", detail, (released,))
        attached = ChildAttached(
            id=event_id,
            quest=parent,
            at=at,
            actor="ephyra:dependents",
            child=child,
            signal=SignalRef.model_validate(request.payload["signal"]),
        )
        return EffectResult("succeeded", {"parent": parent, "attached": child}, (attached,))

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None


class ResumeDependentsAdapter:
    """``resume_dependents``: each child parked waiting for this quest is resumed with
    ``parent_landed`` (it goes back to ``sensed`` and is triaged on its own).

    The same happens when the parent was abandoned (killed, rejected, ignored): its patch will
    never land, so nothing conflicts with the child any more, and the child's own signal is
    still a production error that deserves triage. Killing the children would lose their
    signals; leaving them parked would hide them for ever. ``why`` is kept in the outcome."""

    def run(self, request: EffectRequest) -> EffectResult:
        children = request.payload.get("children", [])
        why = request.payload.get("why", "")
        if why not in {"landed", "abandoned"}:
            raise EffectFailed(f"resume_dependents for {why!r}: only landed or abandoned")
        at = timezone.now()
        events = tuple(
            ParentLanded(
                id=outcome_event_id(request.key, index),
                quest=child,
                at=at,
                actor="ephyra:dependents",
                parent=request.quest_id,
            )
            for index, child in enumerate(children)
        )
        return EffectResult("succeeded", {"children": list(children), "why": why}, events)

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None
