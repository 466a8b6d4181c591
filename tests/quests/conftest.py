"""A workspace with quests at each place a person acts, and people holding roles in it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from ephyra.core.proof import CheckResult
from journal.store import Journal
from quests.engine import quest_apply
from quests.models import Quest, Workspace
from quests.roles import Role, role_grant
from tests.core.lifecycle_helpers import next_event
from tests.core.story import Story
from worker.loop import Worker

PASSING = (CheckResult(name="tests", passed=True),)


@pytest.fixture
def workspace(tmp_path, db):
    path = tmp_path / "shop.git"
    Journal.init(path, bare=True)
    return Workspace.objects.create(slug="shop", name="Shop", repository=str(path))


@pytest.fixture
def other_workspace(tmp_path, db):
    path = tmp_path / "other.git"
    Journal.init(path, bare=True)
    return Workspace.objects.create(slug="other", name="Other", repository=str(path))


def person(username: str, **roles_in: list[Role]):
    """A user account holding ``roles_in[slug]`` roles in each workspace named."""
    user = get_user_model().objects.create_user(username, password="pw-for-tests-only")
    for slug, roles in roles_in.items():
        workspace = Workspace.objects.get(slug=slug)
        for role in roles:
            role_grant(user, workspace, role)
    return user


def drive(workspace: Workspace, quest_id: str, until: str) -> Quest:
    """Apply main-line events directly (test set-up) until the quest is ``until``."""
    story, value = Story(quest_id), None
    for _ in range(30):
        if value is not None and str(value.state) == until:
            return Quest.objects.get(workspace=workspace, quest_id=quest_id)
        outcome = quest_apply(workspace, next_event(story, value, checks=PASSING))
        assert outcome.applied.decision.accepted, outcome.applied.decision.reason
        value = outcome.applied.decision.quest
    raise AssertionError(f"{quest_id} never reached {until}")


def work(workspace: Workspace) -> None:
    """What the workspace's worker does next: apply what was submitted, deliver effects."""
    Worker(owner="test-worker", workspaces=[workspace.slug]).step()
