from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def test_manage_replay_prints_one_json_line_per_event():
    out = StringIO()
    call_command("replay", str(EXAMPLES / "main-line.jsonl"), stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 16
    assert '"state": "closed"' in lines[-1]


def test_manage_replay_fails_with_exit_one_on_an_invalid_transition():
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("replay", str(EXAMPLES / "invalid-transition.jsonl"), stdout=out, stderr=err)
    assert raised.value.returncode == 1
    assert "event e005 (checkpoint_decided)" in err.getvalue()


def test_manage_replay_exits_two_naming_file_and_line_on_a_file_that_is_not_utf8(tmp_path):
    line = (
        b'{"id": "e1", "quest": "q1", "type": "comment_added", "at": "2026-01-01T00:01:00Z",'
        b' "body": "\xff"}\n'
    )
    path = tmp_path / "binary.jsonl"
    path.write_bytes(line)
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("replay", str(path), stdout=out, stderr=err)
    assert raised.value.returncode == 2
    assert str(raised.value) == "replay could not read its input"
    assert out.getvalue() == ""
    assert err.getvalue() == (
        f"{path}:1: the line is not UTF-8 text "
        f"(invalid start byte: byte 0xff at byte {line.index(0xFF) + 1})\n"
    )
