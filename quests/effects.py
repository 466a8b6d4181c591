"""Built-in effect adapters that need nothing outside Ephyra (ephyra/compose.py registers them).

Each returns the events its outcome feeds back, with ids derived from the ledger key, so a
second feeding after a crash is recognised as a redelivery.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from ephyra.core.events import ChildAttached, ParentLanded, SignalRef, TriageDecided
from ephyra.core.ports import EffectFailed, EffectRequest, EffectResult, outcome_event_id
from ephyra.core.states import Severity, State
from ephyra.policy import default_policy, parse_policy
from ephyra.policy.triage import SignalFacts, triage
from intake.otlp_models import FingerprintMute
from intake.triage import signal_facts
from quests.models import Quest, Workspace


class TriageAdapter:
    """``run_triage``: the policy's triage rules over what the quest knows of its signal."""

    def run(self, request: EffectRequest) -> EffectResult:
        workspace = Workspace.objects.select_related("policy").get(slug=request.workspace)
        policy = (
            default_policy()
            if workspace.policy is None
            else parse_policy(workspace.policy.text, f"policy {workspace.policy.digest}")
        )
        quest = Quest.objects.get(workspace=workspace, quest_id=request.quest_id)
        exception_type, paths = signal_facts(workspace, request.quest_id)
        facts = SignalFacts(
            fingerprint=request.payload.get("fingerprint", quest.fingerprint),
            severity=Severity(quest.severity),
            exception_type=exception_type,
            paths=paths,
        )
        result = triage(facts, policy)
        event = TriageDecided(
            id=outcome_event_id(request.key, 0),
            quest=request.quest_id,
            at=timezone.now(),
            actor="ephyra:triage",
            route=result.route,
            risk=result.risk,
            rule=result.rule,
        )
        return EffectResult("succeeded", {"route": result.route, "rule": result.rule}, (event,))

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None  # a computation: retried, never ambiguous


class NotifyInboxAdapter:
    """``notify_inbox``: the inbox lists quests waiting for people from the projection, so the
    notification is recorded here and shown there; nothing leaves Ephyra yet."""

    def run(self, request: EffectRequest) -> EffectResult:
        return EffectResult("succeeded", {"reason": request.payload.get("reason", "")})

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None


class MergeSignalAdapter:
    """``merge_signal``: the engine already counted the signal on the quest and intake keeps
    the signal row; nothing outside Ephyra is told."""

    def run(self, request: EffectRequest) -> EffectResult:
        return EffectResult("succeeded", dict(request.payload))

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None


class MuteFingerprintAdapter:
    """``mute_fingerprint``: the mute intake reads before routing a signal. One row per muting
    quest, so a redelivery rewrites the same row; a count intake already made is kept."""

    def run(self, request: EffectRequest) -> EffectResult:
        fingerprint = request.payload["fingerprint"]
        until = datetime.fromisoformat(request.payload["until"])
        workspace = Workspace.objects.get(slug=request.workspace)
        FingerprintMute.objects.update_or_create(
            workspace=workspace,
            quest_id=request.quest_id,
            defaults={"fingerprint": fingerprint, "until": until},
        )
        return EffectResult("succeeded", {"fingerprint": fingerprint, "until": until.isoformat()})

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
