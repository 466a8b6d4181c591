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
    counts = MinuteCount.objects.filter(
        workspace_id=watch.workspace_id, minute__gt=start, minute__lte=end
    )
    seen = dict(
        counts.values("fingerprint").annotate(n=Sum("signals")).values_list("fingerprint", "n")
    )
    fixed = int(seen.pop(watch.fingerprint, 0) or 0)
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
    """The fingerprints first counted after the deployment's minute whose stored signal has a
    frame in one of the patched files."""
    if not seen or not watch.files:
        return ()
    known = set(
        MinuteCount.objects.filter(
            workspace_id=watch.workspace_id, fingerprint__in=list(seen), minute__lte=start
        )
        .values_list("fingerprint", flat=True)
        .distinct()
    )
    files = frozenset(watch.files)
    new = []
    for fingerprint in sorted(set(seen) - known):
        paths = (
            IngestedSignal.objects.filter(workspace_id=watch.workspace_id, fingerprint=fingerprint)
            .order_by("pk")
            .values_list("paths", flat=True)
            .first()
        )
        if paths and touches(files, tuple(paths)):
            new.append(fingerprint)
    return tuple(new)
