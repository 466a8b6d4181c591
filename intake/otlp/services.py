"""What an accepted OTLP export becomes: ``IngestedSignal`` rows and quest events.

``intake.grouping.Router`` picks each candidate's route (muted, duplicate, conflict, regression
or new; ``docs/grouping.md``); this module stores the signal, counts it (``MinuteCount``) and
submits the route's event. Within one export, the first candidate of a fingerprint opens (or
reopens) the quest and the rest merge; an export's merges into a quest become one counted
``signal_merged``, or are held for the quest's next one (``intake.otlp.sightings``). Ids are derived
from the workspace, the fingerprint and the signal id, so an exporter's retry of the same bytes
stores, counts and submits nothing twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F

from ephyra.core.events import BaseEvent, RegressionReopened, SignalRef, SignalSensed
from ephyra.sql import insert_objects
from ephyra.telemetry import Frame, ParseResult, SignalCandidate
from intake.deployments.otlp import deployments_from_signals
from intake.grouping import Route, Router
from intake.locks import bound_waits, hold
from intake.otlp.models import FingerprintMute, IngestedSignal, IngestToken
from intake.otlp.sightings import Merges, merges_fold, minutes_count
from ledger.inbound import submit_events

SOURCE = "otlp"


def _digest(*parts: object, size: int = 24) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:size]


def signal_id(workspace_id: int, body_digest: str, index: int, candidate: SignalCandidate) -> str:
    """``otlp-<hex>``: the same export (a retry) gives the same ids, in the same order."""
    return f"otlp-{_digest(workspace_id, body_digest, index, candidate.fingerprint)}"


def quest_id(workspace_id: int, fingerprint: str, signal: str) -> str:
    return f"q-{_digest(workspace_id, fingerprint, signal, size=20)}"


_FRAME_FIELDS = tuple(field.name for field in dataclasses.fields(Frame))


def _frames(candidate: SignalCandidate) -> list[dict]:
    # What dataclasses.asdict gives for a frame (its values are plain), without asdict's deep
    # copy of every value, which cost more than all the rest of storing the signal.
    return [{name: getattr(frame, name) for name in _FRAME_FIELDS} for frame in candidate.frames]


def _event(workspace_id: int, route: Route, sid: str, ref: SignalRef, at: datetime):
    """The quest event of a candidate that opens or reopens a quest, with its derived ids;
    None when it is muted or merges (``intake.otlp.sightings`` folds the merges)."""
    fingerprint = ref.fingerprint
    if route.kind in {"muted", "merge"}:
        return None
    if route.kind in {"new", "conflict"}:
        return SignalSensed(
            id=f"sensed-{_digest(workspace_id, fingerprint, sid)}",
            quest=quest_id(workspace_id, fingerprint, sid),
            at=at,
            signal=ref,
            parent=route.parent,
        )
    return RegressionReopened(
        id=f"reopened-{_digest(workspace_id, fingerprint, sid)}",
        quest=route.quest,
        at=at,
        signal=ref,
    )


_KIND = {
    "muted": IngestedSignal.Event.MUTED,
    "merge": IngestedSignal.Event.MERGED,
    "conflict": IngestedSignal.Event.SENSED,
    "reopen": IngestedSignal.Event.REOPENED,
    "new": IngestedSignal.Event.SENSED,
}


def signals_receive(
    token: IngestToken, result: ParseResult, *, body_digest: str, received_at: datetime
) -> list[IngestedSignal]:
    """Store the candidates of one export and submit their quest events, all or nothing.
    The new rows come back without primary keys (they are stored by COPY on PostgreSQL): read
    them, do not save them."""
    workspace = token.workspace
    candidates = result.candidates
    ids = [signal_id(workspace.pk, body_digest, i, c) for i, c in enumerate(candidates)]
    stored: list[IngestedSignal] = []
    new: list[IngestedSignal] = []
    events: list[BaseEvent] = []
    merges: dict[str, Merges] = {}  # quest → this export's signals that merge into it
    muted: Counter[str] = Counter()  # muting quest → signals counted in this export
    with transaction.atomic():
        # An exporter may retry while its first attempt is still being stored: the retry waits
        # for it here, then finds its signals taken (below) instead of inserting them again.
        bound_waits(settings.EPHYRA_OTLP_LOCK_WAIT_MS)  # past it: 503, and the exporter retries
        hold(workspace, "export", [body_digest])
        router = Router(workspace, candidates, received_at)
        # Two exports of a new error would each read "no quest" and each open one: one that
        # would open or reopen a quest holds the export's fingerprints first. All of them, not
        # only the ones unopened now: one open at this read may be closed by the next, and must
        # not then be opened unheld. An export that only merges holds nothing.
        if router.unopened() and hold(workspace, "fingerprint", router.fingerprints):
            # Another export may have opened one of them since the read: read again, now that
            # none can until this transaction ends; it then merges into that one's quest.
            router = Router(workspace, candidates, received_at)
        taken = {
            row.signal_id: row
            for row in IngestedSignal.objects.filter(workspace=workspace, signal_id__in=ids)
        }
        for sid, candidate in zip(ids, candidates, strict=True):
            existing = taken.get(sid)
            if existing is not None:  # a retry of an export already taken
                stored.append(existing)
                if existing.event != IngestedSignal.Event.MUTED:
                    router.opened(candidate.fingerprint, existing.quest_id)
                continue
            ref = SignalRef(
                id=sid,
                fingerprint=candidate.fingerprint,
                severity=candidate.severity,
                title=candidate.title,
            )
            route = router.route(candidate)
            event = _event(workspace.pk, route, sid, ref, received_at)
            if event is not None:
                events.append(event)
                router.opened(candidate.fingerprint, event.quest)
            elif route.kind == "merge":
                if route.quest in merges:
                    merges[route.quest].add(ref)
                else:
                    merges[route.quest] = Merges(candidate.fingerprint, ref)
            else:
                muted[route.quest] += 1
            row = _row(token, candidate, sid, route, event, received_at)
            stored.append(row)
            new.append(row)
        insert_objects(new)  # no keys back: nothing here reads them
        # The rows every export of a storm shares come last, so their locks are held briefly.
        events += merges_fold(workspace, merges, received_at)
        submit_events(workspace, events, source=SOURCE)
        for quest, count in sorted(muted.items()):  # in one order: two exports never deadlock
            _count_muted(workspace, quest, router, count, received_at)
        minutes_count(workspace, Counter(row.fingerprint for row in new), received_at)
        deployments_from_signals(workspace, candidates, received_at)
    return stored


def _row(token, candidate, sid, route: Route, event, received_at) -> IngestedSignal:
    return IngestedSignal(
        workspace=token.workspace,
        token=token,
        signal_id=sid,
        quest_id=event.quest if event is not None else route.quest,
        event=_KIND[route.kind],
        parent=route.parent or "",
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
        paths=list(candidate.paths),
        occurred_at=candidate.at,
        received_at=received_at,
    )


def _count_muted(workspace, quest: str, router: Router, count: int, at: datetime) -> None:
    """Add ``count`` to the mute of ``quest``. The row is the ``mute_fingerprint`` effect's;
    when the worker has journalled the mute but not yet delivered the effect, it is made here
    from the quest's own ``muted_until`` and the effect's delivery then finds it."""
    fingerprint, until = router.mute_of(quest)
    mute, _ = FingerprintMute.objects.get_or_create(
        workspace=workspace, quest_id=quest, defaults={"fingerprint": fingerprint, "until": until}
    )
    FingerprintMute.objects.filter(pk=mute.pk).update(
        muted_signals=F("muted_signals") + count, last_signal_at=at
    )
