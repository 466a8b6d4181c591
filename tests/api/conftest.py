"""A workspace with quests and people, and the API as a script sees it: JSON over HTTP with a
personal token (``call``), or with the session of a logged-in person."""

from __future__ import annotations

import json

import pytest

from api.tokens import token_create
from quests.roles import Role
from tests.quests import conftest as quests
from tests.quests.conftest import person

workspace, other_workspace = quests.workspace, quests.other_workspace
BASE = "/api/v1"


@pytest.fixture(autouse=True)
def _no_wait(settings, tmp_path):
    # No worker answers unless a test runs one (``work``): actions answer "queued" at once.
    settings.EPHYRA_ACTION_WAIT_MS = 0
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir(exist_ok=True)


def token_for(user, slugs=("shop",), role: str = "reviewer", days: int = 90) -> str:
    return token_create(user, workspaces=list(slugs), role=role, days=days).token


def call(client, method: str, path: str, token: str | None = None, body=None, **headers):
    """One request to the API: ``path`` under /api/v1/ (or absolute), JSON ``body``."""
    url = path if path.startswith("/") else f"{BASE}/{path}"
    extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
    if token:
        extra["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    if method == "GET":
        return client.get(url, **extra)
    data = json.dumps(body) if body is not None else ""
    return getattr(client, method.lower())(url, data=data, content_type="application/json", **extra)


@pytest.fixture
def people(workspace, other_workspace):
    return {
        "rita": person("rita", shop=[Role.REVIEWER]),
        "ada": person("ada", shop=[Role.ADMIN]),
        "sam": person("sam", shop=[Role.STAFF]),
        "olga": person("olga", other=[Role.ADMIN]),
    }
