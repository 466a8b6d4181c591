"""Effect adapters that intake owns: triage of a new quest's signal, and the mutes intake reads
before routing a signal (``ephyra/compose.py`` registers them).

Each returns the events its outcome feeds back, with ids derived from the ledger key, so a
second feeding after a crash is recognised as a redelivery.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from ephyra.core.events import TriageDecided
from ephyra.core.ports import EffectRequest, EffectResult, outcome_event_id
from ephyra.core.states import Severity
from ephyra.policy.triage import SignalFacts, triage
from intake.grouping import signal_facts
from intake.otlp.models import FingerprintMute
from quests.models import Quest, Workspace
from quests.workspaces import workspace_policy_document


class TriageAdapter:
    """``run_triage``: the policy's triage rules over what the quest knows of its signal."""

    def run(self, request: EffectRequest) -> EffectResult:
        workspace = Workspace.objects.select_related("policy").get(slug=request.workspace)
        policy = workspace_policy_document(workspace)
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
