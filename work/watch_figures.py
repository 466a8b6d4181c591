"""What a watch counts, from what intake stores: signals per fingerprint and minute
(``MinuteCount``, the minute an export arrived) and, for fingerprints new in the window, the
frames of a stored signal (``IngestedSignal.paths``).

The deployment's own minute belongs to neither side: an export in it may hold signals of the
old code as well as the new. The window is the minutes after it, up to now or the window's end;
the baseline is as many minutes as the window lasts, before it.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import Sum

from ephyra.policy.watch import WatchFigures
from intake.grouping import touches
from intake.models import IngestedSignal, MinuteCount
from work.watch_models import Watch


def minute_of(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(second=0, microsecond=0)


def watch_figures(watch: Watch, now: datetime) -> WatchFigures:
    start = minute_of(watch.since)
    end = min(now, watch.ends_at)
    elapsed = max(1, math.floor((end - start).total_seconds() / 60))
    rows = (
        MinuteCount.objects.filter(
            workspace_id=watch.workspace_id, minute__gt=start, minute__lte=end
        )
        .values("fingerprint")
        .annotate(n=Sum("signals"))
        .values_list("fingerprint", "n")
    )
    seen = {fingerprint: int(n or 0) for fingerprint, n in rows}
    fixed = seen.pop(watch.fingerprint, 0)
    before = MinuteCount.objects.filter(
        workspace_id=watch.workspace_id,
        minute__gte=start - timedelta(minutes=watch.minutes),
        minute__lt=start,
    ).exclude(fingerprint=watch.fingerprint)
    other_before = before.aggregate(n=Sum("signals"))["n"] or 0
    return WatchFigures(
        minutes=elapsed,
        fixed_seen=fixed,
        new_fingerprints=_new_in_files(watch, start, seen),
        other_errors=int(sum(seen.values())),
        other_before=int(other_before),
        minutes_before=watch.minutes,
    )


def _new_in_files(watch: Watch, start: datetime, seen: dict[str, int]) -> tuple[str, ...]:
    """Of the fingerprints counted after the deployment's minute and never before it, those
    whose stored signal has a frame in one of the patched files. One first seen in the
    deployment's own minute is new: an error the deployment brought starts there, and the old
    code would have shown it in the minutes before."""
    if not seen or not watch.files:
        return ()
    new = sorted(set(seen) - _counted_before(watch.workspace_id, sorted(seen), start))
    files = frozenset(watch.files)
    found = []
    for fingerprint in new:
        paths = (
            IngestedSignal.objects.filter(workspace_id=watch.workspace_id, fingerprint=fingerprint)
            .order_by("pk")
            .values_list("paths", flat=True)
            .first()
        )
        if paths and touches(files, tuple(paths)):
            found.append(fingerprint)
    return tuple(found)


def _counted_before(workspace_id: int, fingerprints: list[str], start: datetime) -> set[str]:
    """Which of ``fingerprints`` were counted before ``start``: one probe of the unique
    index per fingerprint, where a DISTINCT over their rows reads their whole history."""
    table = connection.ops.quote_name(MinuteCount._meta.db_table)
    minute = MinuteCount._meta.get_field("minute").get_db_prep_value(start, connection)
    found: set[str] = set()
    for at in range(0, len(fingerprints), 500):
        chunk = fingerprints[at : at + 500]
        values = ", ".join(["(%s)"] * len(chunk))
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT c.column1 FROM (VALUES {values}) AS c WHERE EXISTS (SELECT 1 FROM "
                f"{table} m WHERE m.workspace_id = %s AND m.fingerprint = c.column1 "
                "AND m.minute < %s)",
                [*chunk, workspace_id, minute],
            )
            found.update(row[0] for row in cursor.fetchall())
    return found
