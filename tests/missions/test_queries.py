"""The list and mission pages ask the database the same number of questions however many
missions, work packages, quests and people there are."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from missions import services
from missions.evidence import Evidence
from missions.models import Mission
from missions.roles import mission_role_grant
from tests.quests.conftest import drive

pytestmark = pytest.mark.django_db
TEXT = Evidence("text", text="noted")


def queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def grow(people, workspace, missions: int, wps: int, *, start: int) -> None:
    """``missions`` more missions of ``wps`` work packages each, every WP carried by a quest,
    with roles given to everyone."""
    ada = people["ada"]
    for n in range(start, start + missions):
        mission = services.mission_create(ada, workspace, title=f"mission {n}", key=f"c{n}").mission
        for name, role in (("mia", "maker"), ("cora", "checker"), ("hugo", "human")):
            mission_role_grant(ada, workspace, mission.mission_id, name, role)
        for w in range(wps):
            services.wp_add(ada, mission, title=f"part {w}", key=f"{n}-{w}")
        services.mission_transition(ada, mission, to="planning", role="lead", evidence=TEXT,
                                    key=f"{n}-p")  # fmt: skip
        for w in range(1, wps + 1):
            drive(workspace, f"q{n}-{w}", "hypothesised")
            services.wp_link_quest(ada, mission, f"wp{w}", quest_id=f"q{n}-{w}", key=f"{n}-l{w}")
            services.wp_transition(ada, mission, f"wp{w}", to="ready", role="lead",
                                   evidence=TEXT, key=f"{n}-r{w}")  # fmt: skip


def test_the_list_and_mission_pages_do_not_ask_more_with_more_rows(client, people, workspace):
    client.force_login(people["ada"])
    grow(people, workspace, 1, 2, start=1)
    small = (queries(client, "/missions/"), queries(client, "/missions/shop/m1/"))
    grow(people, workspace, 4, 6, start=2)
    large = (queries(client, "/missions/"), queries(client, "/missions/shop/m5/"))
    assert Mission.objects.count() == 5
    assert small == large
    assert large[0] <= 6 and large[1] <= 10, large
