"""Watch boundaries: whether production after landing is clean, regressed or not yet known."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ephyra.policy.autonomy import WatchPolicy


class WatchVerdict(StrEnum):
    CLEAN = "clean"
    REGRESSION = "regression"
    UNDECIDED = "undecided"


@dataclass(frozen=True, slots=True)
class WatchSample:
    """Counts over a window: requests (or log events) seen, errors among them, new fingerprints."""

    events: int
    errors: int
    new_fingerprints: int = 0
    fingerprint_seen: bool = False  # the quest's own fingerprint came back

    @property
    def error_rate(self) -> float:
        return self.errors / self.events if self.events else 0.0


def judge_watch(
    baseline: WatchSample, observed: WatchSample, policy: WatchPolicy, *, window_over: bool
) -> tuple[WatchVerdict, str]:
    """A verdict with the reason a person would read in the timeline."""
    if observed.fingerprint_seen:
        return WatchVerdict.REGRESSION, "the fixed error was seen again"
    if observed.new_fingerprints > policy.max_new_fingerprints:
        return (
            WatchVerdict.REGRESSION,
            f"{observed.new_fingerprints} new error fingerprints appeared "
            f"(at most {policy.max_new_fingerprints} allowed)",
        )
    if observed.events >= policy.min_events and observed.errors:
        limit = (
            max(baseline.error_rate, 1 / max(policy.min_events, 1)) * policy.max_error_rate_ratio
        )
        if observed.error_rate > limit:
            return (
                WatchVerdict.REGRESSION,
                f"error rate {observed.error_rate:.2%} is above {limit:.2%} "
                f"({policy.max_error_rate_ratio}x the baseline {baseline.error_rate:.2%})",
            )
    if not window_over:
        return WatchVerdict.UNDECIDED, "the watch window is still open"
    if observed.events < policy.min_events:
        return (
            WatchVerdict.UNDECIDED,
            f"only {observed.events} events seen; {policy.min_events} are needed to judge",
        )
    return WatchVerdict.CLEAN, "no regression within the watch window"
