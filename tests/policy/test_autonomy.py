"""The autonomy policy an admin edits: parsed, validated, errors by field and line."""

from pathlib import Path

import pytest

from ephyra.core.rules import CheckpointMode
from ephyra.core.states import Checkpoint
from ephyra.policy import (
    DEFAULT_POLICY_PATH,
    PolicyError,
    default_policy,
    load_policy,
    parse_policy,
)
from ephyra.policy.autonomy import policy_digest

ADVISORY = """\
version: 1
checkpoints:
  A:
    mode: advisory
    thresholds:
      judgement-jev/jev-1.14: 0.9
  B: {mode: shadow}
  C: {mode: blocking}
proof:
  attempts: 5
  matrix:
    low: [tests]
    medium: [tests, lint]
    high: [tests, lint, probe]
triage:
  default: {route: human, risk: medium}
  mute_hours: 12
  rules:
    - name: checkout errors
      when: {severity_at_least: error, paths: ["shop/checkout/**"]}
      route: auto_fix
      risk: low
watch:
  minutes: 45
"""


def test_the_default_policy_makes_every_checkpoint_wait_for_a_person():
    policy = default_policy()
    assert {cp: rule.mode for cp, rule in policy.checkpoints.items()} == {
        Checkpoint.A: CheckpointMode.BLOCKING,
        Checkpoint.B: CheckpointMode.BLOCKING,
        Checkpoint.C: CheckpointMode.BLOCKING,
    }
    assert policy.machine().proof_attempts == 3
    assert policy.machine().mute_hours == 24


def test_a_full_policy_becomes_the_view_the_machine_reads():
    machine = parse_policy(ADVISORY).machine()
    assert machine.rule(Checkpoint.A).mode is CheckpointMode.ADVISORY
    assert dict(machine.rule(Checkpoint.A).thresholds) == {"judgement-jev/jev-1.14": 0.9}
    assert machine.rule(Checkpoint.B).mode is CheckpointMode.SHADOW
    assert machine.proof_attempts == 5
    assert machine.required_checks["medium"] == ("tests", "lint")
    assert machine.mute_hours == 12
    assert machine.watch_minutes == 45


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "version: 1\nproof:\n  attempts: 0\n",
            [("proof.attempts", 3, "Input should be greater than or equal to 1")],
        ),
        (
            "version: 1\ncheckpoints:\n  A: {mode: blocking}\n  B: {mode: sometimes}\n"
            "  C: {mode: blocking}\n",
            [("checkpoints.B.mode", 4, "Input should be 'blocking', 'advisory' or 'shadow'")],
        ),
        (
            "version: 1\ncheckpoints:\n  A: {mode: advisory}\n  B: {}\n  C: {}\n",
            [
                (
                    "checkpoints.A",
                    3,
                    "Value error, an advisory checkpoint needs at least one model threshold",
                )
            ],
        ),
        (
            "version: 1\ncheckpoints:\n  A: {}\n",
            [("checkpoints", 2, "Value error, checkpoints B, C must be configured")],
        ),
        (
            "version: 1\ntriage:\n  rules:\n    - name: x\n      route: auto_fix\n"
            "      when: {severity_at_least: loud}\n",
            [
                (
                    "triage.rules.0.when.severity_at_least",
                    6,
                    "Input should be 'debug', 'info', 'warning', 'error' or 'fatal'",
                )
            ],
        ),
        ("version: 2\n", [("version", 1, "Input should be 1")]),
        (
            "version: 1\nproof:\n  atempts: 3\n",
            [("proof.atempts", 3, "Extra inputs are not permitted")],
        ),
        ("- a\n- b\n", [("", 1, "the policy must be a mapping of sections")]),
    ],
)
def test_an_invalid_policy_names_the_field_and_the_line(text, expected):
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, "policy.yaml")
    assert raised.value.problems == expected
    path, line, message = expected[0]
    assert f"policy.yaml:{line}: {path or '(top)'}: {message}" in str(raised.value)


def test_broken_yaml_is_reported_with_its_line():
    with pytest.raises(PolicyError) as raised:
        parse_policy("version: 1\ncheckpoints:\n  A: {mode: [blocking\n", "p.yaml")
    ((_path, line, message),) = raised.value.problems
    assert line == 4 and message.startswith("not valid YAML")


def test_a_threshold_outside_zero_to_one_is_refused():
    text = ADVISORY.replace("jev-1.14: 0.9", "jev-1.14: 1.5")
    with pytest.raises(PolicyError) as raised:
        parse_policy(text)
    ((path, line, message),) = raised.value.problems
    assert path == "checkpoints.A.thresholds.judgement-jev/jev-1.14"
    assert line == 6
    assert message == "Input should be less than or equal to 1"


def test_a_missing_policy_file_is_a_policy_error(tmp_path):
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "absent.yaml")


def test_an_empty_file_is_the_all_defaults_policy(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_policy(path) == parse_policy("version: 1\n")


def test_the_policy_digest_identifies_the_exact_text():
    text = Path(DEFAULT_POLICY_PATH).read_text()
    assert policy_digest(text) == policy_digest(text)
    assert policy_digest(text) != policy_digest(text + "\n")
    assert policy_digest(text).startswith("sha256:")
