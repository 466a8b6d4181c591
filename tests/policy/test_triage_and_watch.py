import pytest

from ephyra.core.states import Severity
from ephyra.policy import parse_policy
from ephyra.policy.triage import SignalFacts, triage
from ephyra.policy.watch import WatchFigures, WatchVerdict, judge_watch

POLICY = parse_policy(
    """\
version: 1
triage:
  default: {route: human, risk: medium}
  rules:
    - name: known flaky fingerprint
      when: {fingerprints: [fp-flaky]}
      route: ignore
      risk: low
    - name: checkout errors are fixed
      when: {severity_at_least: error, paths: ["shop/checkout/*.py"]}
      route: auto_fix
      risk: low
    - name: anything fatal is researched
      when: {severity_at_least: fatal}
      route: research_only
      risk: high
    - name: timeouts go to a person
      when: {exception_types: [TimeoutError]}
      route: human
      risk: high
watch:
  minutes: 30
  min_events: 100
  max_error_rate_ratio: 2.0
  max_new_fingerprints: 0
"""
)


@pytest.mark.parametrize(
    ("facts", "route", "rule"),
    [
        (SignalFacts("fp-flaky", Severity.FATAL), "ignore", "known flaky fingerprint"),
        (
            SignalFacts("fp1", Severity.ERROR, paths=("shop/checkout/cart.py",)),
            "auto_fix",
            "checkout errors are fixed",
        ),
        (
            SignalFacts("fp1", Severity.WARNING, paths=("shop/checkout/cart.py",)),
            "human",
            "default",
        ),
        (
            SignalFacts("fp1", Severity.FATAL, paths=("shop/search.py",)),
            "research_only",
            "anything fatal is researched",
        ),
        (SignalFacts("fp1", Severity.ERROR, "TimeoutError"), "human", "timeouts go to a person"),
        (SignalFacts("fp1", Severity.ERROR), "human", "default"),
    ],
)
def test_the_first_matching_rule_picks_the_route(facts, route, rule):
    result = triage(facts, POLICY)
    assert (result.route, result.rule) == (route, rule)


def test_a_watch_sees_the_fixed_error_come_back_as_a_regression():
    verdict, why = judge_watch(WatchFigures(3, fixed_seen=2), POLICY.watch, window_over=False)
    assert verdict is WatchVerdict.REGRESSION
    assert why == "the fixed error was seen again: 2 signals in 3 min after the deployment"


def test_other_errors_above_the_ratio_of_their_rate_before_are_a_regression():
    # 100 other errors in 10 minutes against 50 in the 30 before: 10/min against 1.67/min.
    figures = WatchFigures(10, other_errors=100, other_before=50, minutes_before=30)
    verdict, why = judge_watch(figures, POLICY.watch, window_over=False)
    assert verdict is WatchVerdict.REGRESSION
    assert why == (
        "100 other errors in 10 min: 10.00/min is above 3.33/min (2.0x the 1.67/min before)"
    )


def test_fewer_other_errors_than_min_events_are_not_judged_by_their_rate():
    figures = WatchFigures(1, other_errors=99, other_before=0, minutes_before=30)
    assert judge_watch(figures, POLICY.watch, window_over=False)[0] is WatchVerdict.UNDECIDED


def test_a_quiet_window_is_clean_only_once_it_is_over():
    figures = WatchFigures(30, other_errors=5, other_before=5, minutes_before=30)
    assert judge_watch(figures, POLICY.watch, window_over=False)[0] is WatchVerdict.UNDECIDED
    assert judge_watch(figures, POLICY.watch, window_over=True)[0] is WatchVerdict.CLEAN


def test_new_fingerprints_beyond_the_boundary_are_a_regression():
    figures = WatchFigures(5, new_fingerprints=("fp-new",))
    verdict, why = judge_watch(figures, POLICY.watch, window_over=False)
    assert verdict is WatchVerdict.REGRESSION
    assert why == "1 new error fingerprints in the patched files (at most 0 allowed)"
