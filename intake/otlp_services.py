"""What an accepted OTLP export becomes: ``IngestedSignal`` rows and quest events.

A candidate whose fingerprint already has an open quest in the workspace (projected, or opened
by an earlier export whose ``signal_sensed`` the worker has not applied yet) is merged into it;
otherwise it opens a quest. Within one export, the first candidate of a fingerprint opens the
quest and the rest merge. Ids are derived from the workspace, the fingerprint and the signal id,
so an exporter's retry of the same bytes stores and submits nothing twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from ephyra.core.events import SignalMerged, SignalRef, SignalSensed
from ephyra.core.states import TERMINAL
from ephyra.ingest import ParseResult, SignalCandidate
from intake.otlp_models import IngestedSignal, IngestToken
from ledger.inbound import submit_event
from quests.models import Quest

SOURCE = "otlp"


def _digest(*parts: object, size: int = 24) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:size]


def signal_id(workspace_id: int, body_digest: str, index: int, candidate: SignalCandidate) -> str:
    """``otlp-<hex>``: the same export (a retry) gives the same ids, in the same order."""
    return f"otlp-{_digest(workspace_id, body_digest, index, candidate.fingerprint)}"


def quest_id(workspace_id: int, fingerprint: str, signal: str) -> str:
    return f"q-{_digest(workspace_id, fingerprint, signal, size=20)}"


def _open_quests(workspace, fingerprints: Iterable[str]) -> dict[str, str]:
    """fingerprint → the id of its oldest open quest, projected or still queued."""
    fingerprints = set(fingerprints)
    found: dict[str, str] = {}
    projected = (
        Quest.objects.filter(workspace=workspace, fingerprint__in=fingerprints)
        .exclude(state__in=[s.value for s in TERMINAL])
        .order_by("created_at", "pk")
        .values_list("fingerprint", "quest_id")
    )
    for fingerprint, quest in projected:
        found.setdefault(fingerprint, quest)
    known = set(
        Quest.objects.filter(workspace=workspace, fingerprint__in=fingerprints).values_list(
            "quest_id", flat=True
        )
    )
    queued = (
        IngestedSignal.objects.filter(
            workspace=workspace,
            fingerprint__in=fingerprints - found.keys(),
            event=IngestedSignal.Event.SENSED,
        )
        .exclude(quest_id__in=known)
        .order_by("received_at", "pk")
        .values_list("fingerprint", "quest_id")
    )
    for fingerprint, quest in queued:
        found.setdefault(fingerprint, quest)
    return found


def _frames(candidate: SignalCandidate) -> list[dict]:
    return [dataclasses.asdict(frame) for frame in candidate.frames]


def signals_receive(
    token: IngestToken, result: ParseResult, *, body_digest: str, received_at: datetime
) -> list[IngestedSignal]:
    """Store the candidates of one export and submit their quest events, all or nothing."""
    workspace = token.workspace
    stored: list[IngestedSignal] = []
    with transaction.atomic():
        open_quests = _open_quests(workspace, (c.fingerprint for c in result.candidates))
        for index, candidate in enumerate(result.candidates):
            sid = signal_id(workspace.pk, body_digest, index, candidate)
            existing = IngestedSignal.objects.filter(workspace=workspace, signal_id=sid).first()
            if existing is not None:  # a retry of an export already taken
                stored.append(existing)
                open_quests.setdefault(candidate.fingerprint, existing.quest_id)
                continue
            ref = SignalRef(
                id=sid,
                fingerprint=candidate.fingerprint,
                severity=candidate.severity,
                title=candidate.title,
            )
            quest = open_quests.get(candidate.fingerprint)
            if quest is None:
                quest = quest_id(workspace.pk, candidate.fingerprint, sid)
                open_quests[candidate.fingerprint] = quest
                kind = IngestedSignal.Event.SENSED
                event = SignalSensed(
                    id=f"sensed-{_digest(workspace.pk, candidate.fingerprint, sid)}",
                    quest=quest,
                    at=received_at,
                    signal=ref,
                )
            else:
                kind = IngestedSignal.Event.MERGED
                event = SignalMerged(
                    id=f"merged-{_digest(workspace.pk, candidate.fingerprint, sid)}",
                    quest=quest,
                    at=received_at,
                    signal=ref,
                )
            stored.append(
                IngestedSignal.objects.create(
                    workspace=workspace,
                    token=token,
                    signal_id=sid,
                    quest_id=quest,
                    event=kind,
                    source=candidate.source,
                    severity=candidate.severity.value,
                    fingerprint=candidate.fingerprint,
                    fingerprint_version=candidate.fingerprint_version,
                    title=candidate.title,
                    culprit=candidate.culprit,
                    exception_type=candidate.exception_type,
                    message=candidate.message,
                    service=candidate.service,
                    service_version=candidate.service_version,
                    environment=candidate.environment,
                    trace_id=candidate.trace_id,
                    span_id=candidate.span_id,
                    frames=_frames(candidate),
                    occurred_at=candidate.at,
                    received_at=received_at,
                )
            )
            submit_event(workspace, event, source=SOURCE)
    return stored
