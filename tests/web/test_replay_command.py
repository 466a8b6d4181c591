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
