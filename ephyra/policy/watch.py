"""Watch boundaries: whether production after a fix is clean, regressed or not yet known.

Judged from what intake stores, error signals counted per fingerprint and minute, never from
request counts (Ephyra does not receive them). The first rule that holds decides:

1. the fixed error's fingerprint is seen again after the deployment's minute → regression;
2. more new fingerprints whose frames are in the patched files than ``max_new_fingerprints``
   → regression;
3. at least ``min_events`` errors of other fingerprints, at a rate per minute above
   ``max_error_rate_ratio`` times their rate before the window → regression;
4. the window is over → clean.

A regression is reported as soon as it holds, before the window ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ephyra.policy.autonomy import WatchPolicy


class WatchVerdict(StrEnum):
    CLEAN = "clean"
    REGRESSION = "regression"
    UNDECIDED = "undecided"


@dataclass(frozen=True, slots=True)
class WatchFigures:
    """What a watch saw. ``minutes`` is how long the window has run (at least one), and
    ``other_before`` counts the other errors over the ``minutes_before`` ahead of it."""

    minutes: int
    fixed_seen: int = 0  # signals of the fixed fingerprint after the deployment's minute
    new_fingerprints: tuple[str, ...] = ()  # new ones whose frames are in the patched files
    other_errors: int = 0  # signals of every other fingerprint within the window
    other_before: int = 0
    minutes_before: int = 1

    @property
    def rate(self) -> float:
        return self.other_errors / max(self.minutes, 1)

    @property
    def rate_before(self) -> float:
        # A clean baseline counts as one error over its span: the smallest rate it can show.
        return max(self.other_before, 1) / max(self.minutes_before, 1)

    def to_evidence(self) -> dict[str, Any]:
        return {
            "minutes": self.minutes,
            "fixed_seen": self.fixed_seen,
            "new_fingerprints": list(self.new_fingerprints),
            "other_errors": self.other_errors,
            "other_before": self.other_before,
            "minutes_before": self.minutes_before,
            "rate_per_minute": round(self.rate, 3),
            "rate_before_per_minute": round(self.rate_before, 3),
        }


def judge_watch(
    figures: WatchFigures, policy: WatchPolicy, *, window_over: bool
) -> tuple[WatchVerdict, str]:
    """A verdict with the reason a person reads in the timeline."""
    if figures.fixed_seen:
        return (
            WatchVerdict.REGRESSION,
            f"the fixed error was seen again: {figures.fixed_seen} signals in "
            f"{figures.minutes} min after the deployment",
        )
    new = len(figures.new_fingerprints)
    if new > policy.max_new_fingerprints:
        return (
            WatchVerdict.REGRESSION,
            f"{new} new error fingerprints in the patched files "
            f"(at most {policy.max_new_fingerprints} allowed)",
        )
    limit = figures.rate_before * policy.max_error_rate_ratio
    if figures.other_errors >= max(policy.min_events, 1) and figures.rate > limit:
        return (
            WatchVerdict.REGRESSION,
            f"{figures.other_errors} other errors in {figures.minutes} min: "
            f"{figures.rate:.2f}/min is above {limit:.2f}/min "
            f"({policy.max_error_rate_ratio}x the {figures.rate_before:.2f}/min before)",
        )
    if not window_over:
        return WatchVerdict.UNDECIDED, "the watch window is still open"
    return (
        WatchVerdict.CLEAN,
        f"no regression in {figures.minutes} min: the fixed error was not seen, "
        f"{figures.other_errors} other errors ({figures.rate:.2f}/min against "
        f"{figures.rate_before:.2f}/min before)",
    )
