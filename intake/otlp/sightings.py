"""Repeated signals: counted exactly, and folded into few quest events.

An error storm sends the same error thousands of times a minute. Each signal is still stored
(an ``IngestedSignal``) and counted, per fingerprint and minute, in ``MinuteCount``; but the
quest it merges into hears of the repeats in few events, so its journal grows with time, not
with traffic, and the workspace's worker is not buried under them (``docs/grouping.md``):

- the merges of one export into one quest become one ``signal_merged`` whose ``count`` is how
  many signals it stands for;
- a quest gets at most one such event per ``EPHYRA_MERGE_WINDOW_SECONDS``: the signals merged
  within the window after one are *held* on the quest's ``MergeWindow`` and carried by its next
  event, so the journal's count catches up with every signal;
- the next event is the next export's after the window, or the one a timer submits when the
  window ends (``intake.tasks.carry_merges``, through Celery when the doorbell is on), or the
  one the workspace's worker submits when it finds the window over (``merges_sweep``, on each
  of its passes: the sweep that needs no broker).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from ephyra.core.events import SignalMerged, SignalRef
from ephyra.core.states import Severity, higher_severity
from intake.locks import hold
from intake.otlp.models import MergeWindow, MinuteCount
from ledger.inbound import submit_events

log = logging.getLogger(__name__)
CARRY_TASK = "intake.carry_merges"


def merged_event_id(workspace_id: int, fingerprint: str, signal: str) -> str:
    """The id of the ``signal_merged`` that names ``signal``: each signal is named by at most
    one event, so the id is unique, and derived, so a retried export makes no second one."""
    digest = hashlib.sha256(f"{workspace_id}|{fingerprint}|{signal}".encode()).hexdigest()
    return f"merged-{digest[:24]}"


@dataclass(slots=True)
class Merges:
    """The signals of one export that merge into one quest."""

    fingerprint: str
    named: SignalRef  # the one an event names: the most severe, the first of those
    count: int = 1

    def add(self, ref: SignalRef, count: int = 1) -> None:
        """``count`` more signals, ``ref`` the one to name of them (a later one than
        ``named``: it is named instead only when it is more severe)."""
        self.count += count
        if higher_severity(self.named.severity, ref.severity) is not self.named.severity:
            self.named = ref


def merges_fold(workspace, merges: dict[str, Merges], at: datetime) -> list[SignalMerged]:
    """The ``signal_merged`` events of an export's merges (quest id → its merges) at ``at``:
    one per quest whose window is over (or that has none yet), carrying what it held too;
    the merges of the other quests are held on their window. Inside the export's transaction,
    holding each quest's lock (``intake.locks``) until it commits."""
    if not merges:
        return []
    quests = sorted(merges)
    hold(workspace, "merge", quests)
    rows = {
        row.quest_id: row
        for row in MergeWindow.objects.filter(workspace=workspace, quest_id__in=quests)
    }
    window = timedelta(seconds=settings.EPHYRA_MERGE_WINDOW_SECONDS)
    events: list[SignalMerged] = []
    new: list[MergeWindow] = []
    changed: list[MergeWindow] = []
    timers: list[tuple[str, float]] = []
    for quest in quests:
        merged = merges[quest]
        row = rows.get(quest)
        if row is None:  # the quest's first merges: its window opens with this event
            row = MergeWindow(workspace=workspace, quest_id=quest, fingerprint=merged.fingerprint)
            new.append(row)
        else:
            changed.append(row)
            if row.held:  # held ones came first: they are named unless this export's is worse
                held = Merges(row.fingerprint, _held_ref(row), row.held)
                held.add(merged.named, merged.count)
                merged = held
        if row.last_event_at is None or at - row.last_event_at >= window:
            events.append(_event(workspace, quest, merged, at))
            _carried(row, at)
        else:
            if not row.held:  # the first held since the last event: one timer per window
                timers.append((quest, (row.last_event_at + window - at).total_seconds()))
            _hold(row, merged)
    MergeWindow.objects.bulk_create(new)
    MergeWindow.objects.bulk_update(
        changed, ["last_event_at", "held", "signal_id", "severity", "title"]
    )
    for quest, delay in timers:
        _schedule(workspace.pk, quest, delay)
    return events


def merges_carry(workspace, quest: str, now: datetime) -> SignalMerged | None:
    """Submit the ``signal_merged`` that carries what ``quest`` holds, if its window is over
    at ``now``; the event, or None when there is nothing to carry yet (the timer that came
    early is set again for the window's end)."""
    with transaction.atomic():
        hold(workspace, "merge", [quest])
        row = MergeWindow.objects.filter(workspace=workspace, quest_id=quest).first()
        if row is None or not row.held:
            return None
        due = row.last_event_at + timedelta(seconds=settings.EPHYRA_MERGE_WINDOW_SECONDS)
        if now < due:
            _schedule(workspace.pk, quest, (due - now).total_seconds())
            return None
        merged = Merges(row.fingerprint, _held_ref(row), row.held)
        event = _event(workspace, quest, merged, now)
        _carried(row, now)
        row.save(update_fields=["last_event_at", "held", "signal_id", "severity", "title"])
        submit_events(workspace, [event], source="otlp")
    return event


def merges_sweep(workspace, now: datetime) -> int:
    """Carry every held window of the workspace that is over at ``now`` (the worker calls this
    on each pass, so held signals are carried without a Celery timer too); how many."""
    due = now - timedelta(seconds=settings.EPHYRA_MERGE_WINDOW_SECONDS)
    quests = MergeWindow.objects.filter(
        workspace=workspace, held__gt=0, last_event_at__lte=due
    ).values_list("quest_id", flat=True)
    return sum(merges_carry(workspace, quest, now) is not None for quest in list(quests))


def minutes_count(workspace, fingerprints: Counter[str], at: datetime) -> None:
    """Add an export's signals (fingerprint → how many) to their counts of ``at``'s minute: one
    upsert, in fingerprint order (two exports adding to the same rows never wait in a cycle)."""
    if not fingerprints:
        return
    minute = at.astimezone(UTC).replace(second=0, microsecond=0)
    table = connection.ops.quote_name(MinuteCount._meta.db_table)
    field = MinuteCount._meta.get_field("minute")
    prepared = field.get_db_prep_save(minute, connection)
    rows = sorted(fingerprints.items())
    for start in range(0, len(rows), 1000):
        chunk = rows[start : start + 1000]
        values = ", ".join(["(%s, %s, %s, %s)"] * len(chunk))
        params = [p for fingerprint, n in chunk for p in (workspace.pk, fingerprint, prepared, n)]
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (workspace_id, fingerprint, minute, signals) "
                f"VALUES {values} ON CONFLICT (workspace_id, fingerprint, minute) "
                f"DO UPDATE SET signals = {table}.signals + excluded.signals",
                params,
            )


def _event(workspace, quest: str, merged: Merges, at: datetime) -> SignalMerged:
    return SignalMerged(
        id=merged_event_id(workspace.pk, merged.fingerprint, merged.named.id),
        quest=quest,
        at=at,
        signal=merged.named,
        count=merged.count,
    )


def _held_ref(row: MergeWindow) -> SignalRef:
    return SignalRef(
        id=row.signal_id,
        fingerprint=row.fingerprint,
        severity=Severity(row.severity),
        title=row.title,
    )


def _carried(row: MergeWindow, at: datetime) -> None:
    row.last_event_at = at
    row.held = 0
    row.signal_id = row.severity = row.title = ""


def _hold(row: MergeWindow, merged: Merges) -> None:
    row.held = merged.count
    row.signal_id = merged.named.id
    row.severity = merged.named.severity.value
    row.title = merged.named.title


def _schedule(workspace_id: int, quest: str, delay: float) -> None:
    """Ask a worker to carry ``quest``'s held signals ``delay`` seconds from now, once the
    surrounding transaction commits. Like the doorbell, only a reminder: a lost one leaves the
    signals held (and counted) until the quest's next export carries them."""
    if not settings.EPHYRA_DOORBELL:
        return

    def send() -> None:
        from ephyra.celery import app

        try:
            app.send_task(
                CARRY_TASK,
                args=[workspace_id, quest],
                countdown=max(1.0, delay),
                queue=settings.CELERY_TASK_DEFAULT_QUEUE,
            )
        except Exception:  # the broker being down must not fail the export
            log.warning("could not set the merge timer of quest %s", quest, exc_info=True)

    transaction.on_commit(send)
