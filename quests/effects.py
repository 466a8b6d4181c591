"""Built-in effect adapters that need nothing outside Ephyra (ephyra/compose.py registers them).

Each returns the events its outcome feeds back, with ids derived from the ledger key, so a
second feeding after a crash is recognised as a redelivery.
"""

from __future__ import annotations

from django.utils import timezone

from ephyra.core.events import TriageDecided
from ephyra.core.ports import EffectRequest, EffectResult, outcome_event_id
from ephyra.core.states import Severity
from ephyra.policy import default_policy, parse_policy
from ephyra.policy.triage import SignalFacts, triage
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
        facts = SignalFacts(
            fingerprint=request.payload.get("fingerprint", quest.fingerprint),
            severity=Severity(quest.severity),
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
