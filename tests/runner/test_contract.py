"""The runner's contract (``ephyra.core.ports``): requests and limits refuse bad values with a
clear message, and a result survives the trip through JSON."""

from __future__ import annotations

import json

import pytest

from ephyra.core.ports import RunLimits, RunRequest, RunResult


def request(**changes) -> RunRequest:
    values = {"argv": ["pytest", "-x"], "cwd": "/w", "artifacts_dir": "/a", "name": "test-1"}
    return RunRequest(**(values | changes))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"argv": []}, "argv must be a non-empty list"),
        ({"argv": ["sh", ""]}, "argv must be a non-empty list"),
        ({"argv": ["sh", 3]}, "argv must be a non-empty list"),
        ({"argv": ["echo", "a\0b"]}, "argv must not contain NUL"),
        ({"name": "../escape"}, "run name '../escape' must be"),
        ({"name": ".hidden"}, "run name '.hidden' must be"),
        ({"name": ""}, "run name '' must be"),
        ({"env": {"BAD-NAME": "x"}}, "environment variable name 'BAD-NAME' is not a valid name"),
        ({"env": {"A": 1}}, "environment variable A must be a string"),
        ({"env": {"A": "x\0y"}}, "environment variable A must be a string without NUL"),
    ],
)
def test_a_request_the_runner_cannot_honour_is_refused_with_the_reason(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        request(**changes)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"wall_seconds": 0}, "wall_seconds must be a positive number, not 0"),
        ({"wall_seconds": float("inf")}, "wall_seconds must be a positive number, not inf"),
        ({"wall_seconds": True}, "wall_seconds must be a positive number, not True"),
        ({"cpu_seconds": -1}, "cpu_seconds must be a positive integer, not -1"),
        ({"address_space_bytes": 1.5}, "address_space_bytes must be a positive integer, not 1.5"),
        ({"output_bytes": None}, "output_bytes must be a positive integer, not None"),
        ({"output_bytes": 1}, "output_bytes must keep at least one byte of head and one of tail"),
    ],
)
def test_limits_out_of_range_are_refused_with_the_reason(changes, message):
    with pytest.raises(ValueError, match=message):
        RunLimits(**changes)


def test_a_limit_of_none_leaves_that_resource_unlimited_by_the_runner():
    limits = RunLimits(cpu_seconds=None, processes=None)

    assert limits.cpu_seconds is None
    assert RunLimits.from_dict(limits.to_dict()) == limits


def test_a_request_keeps_its_environment_as_given_and_read_only():
    env = {"PATH": "/venv/bin:/usr/bin"}
    made = request(env=env)
    env["PATH"] = "/changed"

    assert dict(made.env) == {"PATH": "/venv/bin:/usr/bin"}
    assert made.argv == ("pytest", "-x")
    with pytest.raises(TypeError):
        made.env["PATH"] = "/x"  # type: ignore[index]


def test_a_result_survives_json_and_says_how_it_ended():
    result = RunResult(
        runner="local",
        argv=("pytest", "-x"),
        cwd="/w",
        env_names=("HOME", "PATH"),
        limits=RunLimits(wall_seconds=30),
        started_at="2025-01-01T00:00:00.000+00:00",
        duration_seconds=30.2,
        exit_code=None,
        signal="SIGTERM",
        timed_out=True,
        stopped=False,
        output_excerpt="collected 3 items\n",
        output_size=18,
        output_sha256="0" * 64,
        output_path="/a/test-1.log",
        output_cut=0,
    )

    again = RunResult.from_dict(json.loads(json.dumps(result.to_dict())))

    assert again == result
    assert not again.ok
    assert again.describe() == (
        "local: killed by SIGTERM at the wall-clock limit of 30 s after 30.2 s"
    )
