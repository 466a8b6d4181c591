"""EPHYRA_LOG_FORMAT=json: one JSON object per line, a line per transition and per effect
outcome with the quest and the key, and a secret planted in an event never in any line."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest

from ephyra.logformat import JsonFormatter
from journal.store import Journal
from ledger.inbound import submit_event
from quests.models import Workspace
from tests.core.story import Story
from worker.loop import Worker

ROOT = Path(__file__).resolve().parents[2]
# A GitHub token, split so that no scanner takes this file for a leak; valid as a quest id.
SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


@pytest.fixture
def json_log():
    """What the settings install under EPHYRA_LOG_FORMAT=json, on the root logger."""
    stream = StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def test_a_worker_step_logs_each_transition_and_effect_outcome_as_redacted_json(
    db, tmp_path, json_log
):
    Journal.init(tmp_path / "mirror.git", bare=True)
    workspace = Workspace.objects.create(
        slug="shop", name="Shop", repository=str(tmp_path / "mirror.git")
    )
    quest = f"q-{SECRET}"
    story = Story(quest)
    submit_event(workspace, story.signal(), source="test")
    Worker(owner="w1").step()

    text = json_log.getvalue()
    lines = [json.loads(line) for line in text.splitlines()]  # every line is one JSON object
    assert SECRET not in text and SECRET[:12] not in text
    moves = [line for line in lines if line["logger"] == "ephyra.transitions"]
    assert [(m["event_type"], m["from"], m["to"]) for m in moves] == [
        ("signal_sensed", "-", "sensed"),
        ("triage_decided", "sensed", "triaged"),
    ][: len(moves)]
    assert moves and all(len(m["journal_head"]) == 40 for m in moves)
    assert all("[redacted:github-token]" in m["quest"] for m in moves)
    effects = [line for line in lines if line["logger"] == "ephyra.effects"]
    assert effects, "no effect outcome was logged"
    first = effects[0]
    assert (first["effect_type"], first["state"]) == ("run_triage", "succeeded")
    assert "[redacted:github-token]" in first["key"] and first["duration_seconds"] >= 0
    assert {"at", "level", "message"} <= set(first)


def test_the_setting_puts_json_on_standard_error_and_text_stays_the_default(tmp_path):
    program = (
        "import django, logging; django.setup(); "
        "logging.getLogger('ephyra.transitions')"
        ".info('moved', extra={'quest': 'q1', 'password': 'p'})"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("EPHYRA_", "DATABASE_URL", "REDIS_URL"))
    }
    env |= {
        "DJANGO_SETTINGS_MODULE": "ephyra.settings",
        "SECRET_KEY": "not-a-real-key",
        "EPHYRA_DATA_DIR": str(tmp_path),
    }

    def run(**extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", program],
            cwd=ROOT,
            env=env | extra,
            capture_output=True,
            text=True,
            timeout=60,
        )

    line = json.loads(run(EPHYRA_LOG_FORMAT="json").stderr.strip())
    assert (line["logger"], line["message"], line["quest"]) == ("ephyra.transitions", "moved", "q1")
    assert line["password"] == "[withheld]"
    assert run().stderr.strip() == "moved"
    # The text format is redacted too.
    program = f"import django, logging; django.setup(); logging.getLogger('x').warning('{SECRET}')"
    assert run().stderr.strip() == "[redacted:github-token]"
    refused = run(EPHYRA_LOG_FORMAT="xml")
    assert refused.returncode != 0
    assert "EPHYRA_LOG_FORMAT must be text or json, not 'xml'" in refused.stderr
