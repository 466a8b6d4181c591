"""The policy's ``watch.starts``: whether a landed quest's watch window opens at landing or at
the production deployment that carries the landed commit (docs/lifecycle.md)."""

import pytest

from ephyra.core.rules import WatchStart
from ephyra.policy import PolicyError, default_policy, parse_policy


def test_by_default_the_watch_opens_at_landing_as_the_seed_says():
    assert default_policy().machine().watch_from is WatchStart.LANDING


def test_a_policy_may_open_the_watch_at_the_deployment():
    policy = parse_policy("version: 1\nwatch:\n  starts: deployment\n")
    assert policy.machine().watch_from is WatchStart.DEPLOYMENT


def test_another_start_is_refused_with_its_field_and_line():
    with pytest.raises(PolicyError) as raised:
        parse_policy("version: 1\nwatch:\n  minutes: 30\n  starts: merge\n")
    assert raised.value.problems == [
        ("watch.starts", 4, "Input should be 'landing' or 'deployment'")
    ]
