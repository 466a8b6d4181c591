"""The real ``ephyra`` console script, run as a subprocess: with a home of its own (its config
file under tmp_path), no EPHYRA_* or NO_COLOR from the test run, and, for the server commands,
against Django's live server with a worker thread applying what people submit."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "ephyra"


@dataclass
class Ran:
    code: int
    out: str
    err: str


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("EPHYRA_", "DJANGO_")) and k not in ("NO_COLOR", "FORCE_COLOR")
    }
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
    return env


@pytest.fixture
def ephyra(cli_env):
    """Run ``ephyra ARGS``; ``env`` adds variables, ``stdin`` feeds it."""
    if not SCRIPT.exists():
        pytest.fail(f"{SCRIPT} is missing: install the package (make .venv/.installed)")

    def run(*args: str, env: dict[str, str] | None = None, stdin: str = "", timeout=60) -> Ran:
        done = subprocess.run(
            [str(SCRIPT), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env={**cli_env, **(env or {})},
            timeout=timeout,
            check=False,
        )
        return Ran(done.returncode, done.stdout, done.stderr)

    return run


@pytest.fixture
def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def serving(transactional_db, settings, tmp_path):
    """A worker thread serving every workspace, polling fast, for the length of the test (as
    ``make run`` starts one beside the server). No adapter answers for the outside world: a
    test plays it (``advance``) or names the adapters it needs before this fixture runs."""
    from ephyra.compose import BUILTIN_ADAPTERS, effect_adapters
    from tests.audit_tampering import erase_audit_log
    from worker.loop import Worker

    settings.EPHYRA_POLL_MS = 20
    settings.EPHYRA_ACTION_WAIT_MS = 10_000
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir(exist_ok=True)
    settings.EPHYRA_EFFECT_ADAPTERS = {name: "" for name in BUILTIN_ADAPTERS}
    effect_adapters.cache_clear()
    worker = Worker(owner="cli-test-worker")
    worker.start()
    yield worker
    worker.stop()
    effect_adapters.cache_clear()
    erase_audit_log()  # the append-only audit rows would refuse the flush after the test


@pytest.fixture
def shop(tmp_path, serving):
    """The workspace ``shop`` (and ``other``) with rita (reviewer), ada and adam (admins),
    mia and cora (reviewers, for missions) and sam (staff); olga is an admin of ``other``."""
    from journal.store import Journal
    from quests.models import Workspace
    from quests.roles import Role
    from tests.quests.conftest import person

    for slug in ("shop", "other"):
        path = tmp_path / f"{slug}.git"
        Journal.init(path, bare=True)
        Workspace.objects.create(slug=slug, name=slug.title(), repository=str(path))
    person("rita", shop=[Role.REVIEWER])
    person("mia", shop=[Role.REVIEWER])
    person("cora", shop=[Role.REVIEWER])
    person("ada", shop=[Role.ADMIN])
    person("adam", shop=[Role.ADMIN])
    person("sam", shop=[Role.STAFF])
    person("olga", other=[Role.ADMIN])
    return Workspace.objects.get(slug="shop")


@pytest.fixture
def server(live_server, shop):
    """The live server's URL and ``as_(username)``: the environment that makes ``ephyra`` act
    as that person (a fresh personal token of the person's role in shop, or in other)."""
    from django.contrib.auth import get_user_model

    from api.tokens import token_create
    from quests.roles import workspace_roles

    tokens: dict[str, str] = {}

    def as_(username: str, workspace: str = "shop") -> dict[str, str]:
        if username not in tokens:
            user = get_user_model().objects.get(username=username)
            role = sorted(workspace_roles(user)[workspace])[0]
            tokens[username] = token_create(user, workspaces=[workspace], role=role).token
        return {"EPHYRA_URL": live_server.url, "EPHYRA_TOKEN": tokens[username]}

    return Server(live_server.url, as_)


@dataclass
class Server:
    url: str
    as_: object


def advance(workspace, story, until: str) -> None:
    """Submit the outside world's next events (a reproduction, a plan, a proof) for the worker
    until the quest is ``until``."""
    from ephyra.core.quest import Quest as QuestValue
    from ledger.inbound import submit_event
    from quests.models import Quest
    from tests.core.lifecycle_helpers import next_event
    from tests.quests.conftest import PASSING
    from tests.waiting import wait_until

    for _ in range(20):
        row = Quest.objects.filter(workspace=workspace, quest_id=story.quest).first()
        if row is not None and row.state == until:
            return
        value = None if row is None else QuestValue.from_dict(row.data)
        submit_event(workspace, next_event(story, value, checks=PASSING), source="test")
        head = row.journal_head if row else ""
        moved = Quest.objects.filter(quest_id=story.quest).exclude(journal_head=head)
        assert wait_until(moved.exists, 20), "the worker did not apply the event"
    raise AssertionError(f"{story.quest} never reached {until}")
