"""Replay from the command line: the way anyone checks the machine."""

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ephyra.replay import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
_spec = importlib.util.spec_from_file_location("make_examples", EXAMPLES / "make_examples.py")
make_examples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_examples)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ephyra.replay", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_shipped_examples_are_current():
    for name, build in make_examples.EXAMPLES.items():
        assert (EXAMPLES / name).read_text(encoding="utf-8") == build().text(), name


@pytest.mark.parametrize(
    "name", ["main-line.jsonl", "claims-and-revisions.jsonl", "intake-routes.jsonl"]
)
def test_each_valid_example_replays_with_exit_zero(name):
    result = run(str(EXAMPLES / name))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    events = [
        line
        for line in (EXAMPLES / name).read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert len(lines) == len(events)
    assert all(line["outcome"] in {"accepted", "absorbed"} for line in lines)


def test_the_main_line_example_ends_closed_with_every_decision_printed():
    result = run(str(EXAMPLES / "main-line.jsonl"))
    decisions = [json.loads(line) for line in result.stdout.splitlines()]
    assert [d["state"] for d in decisions][-3:] == ["watching", "closed", "closed"]
    assert decisions[0]["effects"] == ["checkout-500:1:run_triage:e001:0"]
    assert decisions[12]["effects"] == [
        "checkout-500:1:start_watch:e013:0",
        "checkout-500:1:register_regression_probe:e013:0",
    ]


def test_an_invalid_transition_exits_one_and_names_the_event():
    result = run(str(EXAMPLES / "invalid-transition.jsonl"))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "invalid transition: event e005 (checkpoint_decided) for quest billing-rounding "
        "in state hypothesised: checkpoint C is not open; the quest is hypothesised"
    )
    last = json.loads(result.stdout.splitlines()[-1])
    assert last["outcome"] == "refused"
    assert last["reason"] == "checkpoint C is not open; the quest is hypothesised"


def test_replaying_twice_prints_identical_lines():
    first = run(str(EXAMPLES / "claims-and-revisions.jsonl")).stdout
    second = run(str(EXAMPLES / "claims-and-revisions.jsonl")).stdout
    assert first == second and first


def test_a_malformed_event_line_exits_two_naming_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "e1", "quest": "q1", "type": "signal_sensed", "at": "2026-01-01T00:00:00Z",'
        ' "signal": {"id": "s1", "fingerprint": "f"}}\n'
        '{"id": "e2", "quest": "q1", "type": "triage_decided", "at": "2026-01-01T00:01:00Z",'
        ' "route": "sideways"}\n'
    )
    result = run(str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"{path}:2: triage_decided.route: Input should be")


def test_an_event_time_without_an_offset_is_refused(tmp_path):
    path = tmp_path / "naive.jsonl"
    path.write_text(
        '{"id": "e1", "quest": "q1", "type": "signal_sensed", "at": "2026-01-01T00:00:00",'
        ' "signal": {"id": "s1", "fingerprint": "f"}}\n'
    )
    result = run(str(path))
    assert result.returncode == 2
    assert "signal_sensed.at: Input should have timezone info" in result.stderr


def test_a_missing_file_exits_two(tmp_path):
    result = run(str(tmp_path / "nope.jsonl"))
    assert result.returncode == 2
    assert "cannot read: No such file or directory" in result.stderr


def test_an_invalid_policy_exits_two_with_its_line(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nproof:\n  attempts: 0\n")
    result = run(str(EXAMPLES / "main-line.jsonl"), "--policy", str(policy))
    assert result.returncode == 2
    assert f"{policy}:3: proof.attempts: Input should be greater than or equal to 1" in (
        result.stderr
    )


def test_a_policy_changes_the_decisions(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nproof:\n  attempts: 1\n")
    result = run(str(EXAMPLES / "main-line.jsonl"), "--policy", str(policy))
    decisions = [json.loads(line) for line in result.stdout.splitlines()]
    assert decisions[8]["state"] == "parked"  # the single allowed proof attempt failed
    assert result.returncode == 1  # the next patch_recorded no longer fits


def test_the_console_entry_point_matches_the_module(capsys):
    code = main([str(EXAMPLES / "main-line.jsonl")])
    out = capsys.readouterr().out
    assert code == 0
    assert out == run(str(EXAMPLES / "main-line.jsonl")).stdout


def test_blank_lines_and_comments_are_skipped():
    from ephyra.replay import read_events

    text = io.StringIO(
        "# a comment\n\n"
        '{"id": "e1", "quest": "q1", "type": "signal_sensed", "at": "2026-01-01T00:00:00Z",'
        ' "signal": {"id": "s1", "fingerprint": "f"}}\n'
    )
    assert [e.id for e in read_events(text)] == ["e1"]


LINE_TWO = (
    b'{"id": "e2", "quest": "q1", "type": "comment_added", "at": "2026-01-01T00:01:00Z",'
    b' "body": "caf\xe9"}\n'  # "cafe" with an acute accent, saved as Latin-1
)
NOT_UTF8 = (
    ": the line is not UTF-8 text (invalid continuation byte: "
    f"byte 0xe9 at byte {LINE_TWO.index(0xE9) + 1})\n"
)


def _file_with_latin1_on_line_two(tmp_path: Path) -> Path:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(
        b'{"id": "e1", "quest": "q1", "type": "signal_sensed", "at": "2026-01-01T00:00:00Z",'
        b' "signal": {"id": "s1", "fingerprint": "f"}}\n' + LINE_TWO
    )
    return path


def test_a_file_that_is_not_utf8_exits_two_naming_file_and_line(tmp_path):
    path = _file_with_latin1_on_line_two(tmp_path)
    result = run(str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"{path}:2{NOT_UTF8}"


def test_the_console_entry_point_reports_a_file_that_is_not_utf8(tmp_path, capsys):
    path = _file_with_latin1_on_line_two(tmp_path)
    assert main([str(path)]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"{path}:2{NOT_UTF8}")
