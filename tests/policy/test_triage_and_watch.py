import pytest

from ephyra.core.states import Severity
from ephyra.policy import parse_policy
from ephyra.policy.triage import SignalFacts, triage
from ephyra.policy.watch import WatchSample, WatchVerdict, judge_watch

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
    verdict, why = judge_watch(
        WatchSample(1000, 5),
        WatchSample(10, 1, fingerprint_seen=True),
        POLICY.watch,
        window_over=False,
    )
    assert verdict is WatchVerdict.REGRESSION and why == "the fixed error was seen again"


def test_a_doubling_of_the_error_rate_is_a_regression():
    verdict, why = judge_watch(
        WatchSample(1000, 10), WatchSample(500, 25), POLICY.watch, window_over=False
    )
    assert verdict is WatchVerdict.REGRESSION
    assert why == "error rate 5.00% is above 2.00% (2.0x the baseline 1.00%)"


def test_a_quiet_window_is_clean_only_once_it_is_over_and_saw_enough():
    assert (
        judge_watch(WatchSample(1000, 10), WatchSample(500, 5), POLICY.watch, window_over=False)[0]
        is WatchVerdict.UNDECIDED
    )
    assert judge_watch(
        WatchSample(1000, 10), WatchSample(50, 0), POLICY.watch, window_over=True
    ) == (WatchVerdict.UNDECIDED, "only 50 events seen; 100 are needed to judge")
    assert (
        judge_watch(WatchSample(1000, 10), WatchSample(500, 5), POLICY.watch, window_over=True)[0]
        is WatchVerdict.CLEAN
    )


def test_new_fingerprints_beyond_the_boundary_are_a_regression():
    verdict, why = judge_watch(
        WatchSample(1000, 10),
        WatchSample(500, 0, new_fingerprints=1),
        POLICY.watch,
        window_over=False,
    )
    assert verdict is WatchVerdict.REGRESSION
    assert why == "1 new error fingerprints appeared (at most 0 allowed)"
