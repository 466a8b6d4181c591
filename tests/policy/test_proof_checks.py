"""The proof matrix names checks that exist: the built-in ones or the commands of
``work.checks``; a name that is neither is refused with its line."""

import pytest

from ephyra.policy import PolicyError, parse_policy

UNKNOWN = """\
version: 1
proof:
  matrix:
    low: [tests]
    medium: [tests]
    high: [tests, lint, probe, typecheck]
"""


def test_a_matrix_naming_an_unknown_check_is_refused_with_its_line():
    with pytest.raises(PolicyError) as refused:
        parse_policy(UNKNOWN, "my-policy.yaml")
    assert refused.value.problems == [
        (
            "proof.matrix.high.3",
            6,
            "no check 'typecheck': name one of tests, probe, lint, or add it to work.checks",
        )
    ]
    assert "my-policy.yaml:6: proof.matrix.high.3: no check 'typecheck'" in str(refused.value)


def test_a_check_named_in_work_checks_and_allow_flaky_are_taken():
    text = UNKNOWN + "  allow_flaky: true\nwork:\n  checks:\n    typecheck: mypy src\n"
    policy = parse_policy(text)
    assert policy.proof.allow_flaky is True
    assert policy.work.checks["typecheck"] == ["mypy", "src"]
    assert policy.machine().required_checks["high"] == ("tests", "lint", "probe", "typecheck")


def test_flaky_checks_count_as_failed_by_default():
    assert parse_policy("version: 1\n").proof.allow_flaky is False
