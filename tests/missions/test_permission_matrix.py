"""Every kind of person, every mission page and action: each cell an exact status.

Rows are the people: nobody logged in; of ``shop``: an admin who leads the mission, a reviewer
who is its maker, a reviewer who is its checker, a reviewer with no role on it, a staff member
given a role on it while they were a reviewer; and an admin of ``other`` only. Columns are the
mission pages (GET) and actions (POST) on ``shop``'s missions. A new page or action gets a
column here, or the last test says it is missing."""

from __future__ import annotations

import hashlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from missions import services
from missions.evidence import Evidence
from missions.models import Mission
from missions.roles import mission_role_grant
from quests.roles import Role, role_grant, role_revoke
from tests.quests.conftest import drive, person

pytestmark = pytest.mark.django_db

ANON, LEAD, MAKER, CHECKER, NOBODY, STAFF, OUTSIDER = (
    "anonymous", "lead", "maker", "checker", "no role", "staff", "outsider",
)  # fmt: skip
LOGIN = 302
GET, POST = "GET", "POST"
TEXT = Evidence("text", text="noted")

COLUMNS = {
    "missions list": (GET, lambda w: "/missions/", None),
    "mission page": (GET, lambda w: "/missions/shop/m1/", None),
    "evidence file": (GET, lambda w: w["file_url"], None),
    "create a mission": (POST, lambda w: "/missions/new", "create"),
    "move a work package": (POST, lambda w: "/missions/shop/m1/move", "wp_move"),
    "move the mission": (POST, lambda w: "/missions/shop/m1/move", "mission_move"),
    "supersede a work package": (POST, lambda w: "/missions/shop/m1/supersede", "supersede"),
    "link a quest": (POST, lambda w: "/missions/shop/m1/link", "link"),
    "add a work package": (POST, lambda w: "/missions/shop/m2/wps", "add"),
    "give a role": (POST, lambda w: "/missions/shop/m1/roles", "grant"),
}
# 303: the post/redirect/get of an action taken (or refused by the machine); 403: a role the
# person does not hold (a mission role, or the workspace's admin for creating and roles);
# 404: another workspace's mission, as if it did not exist.
EXPECTED = {
    "missions list": {ANON: LOGIN, LEAD: 200, MAKER: 200, CHECKER: 200, NOBODY: 200,
                      STAFF: 200, OUTSIDER: 200},
    "mission page": {ANON: LOGIN, LEAD: 200, MAKER: 200, CHECKER: 200, NOBODY: 200,
                     STAFF: 200, OUTSIDER: 404},
    "evidence file": {ANON: LOGIN, LEAD: 200, MAKER: 200, CHECKER: 200, NOBODY: 200,
                      STAFF: 200, OUTSIDER: 404},
    "create a mission": {ANON: LOGIN, LEAD: 303, MAKER: 403, CHECKER: 403, NOBODY: 403,
                         STAFF: 403, OUTSIDER: 404},
    "move a work package": {ANON: LOGIN, LEAD: 403, MAKER: 303, CHECKER: 403, NOBODY: 403,
                            STAFF: 403, OUTSIDER: 404},
    "move the mission": {ANON: LOGIN, LEAD: 303, MAKER: 403, CHECKER: 403, NOBODY: 403,
                         STAFF: 403, OUTSIDER: 404},
    "supersede a work package": {ANON: LOGIN, LEAD: 303, MAKER: 403, CHECKER: 403,
                                 NOBODY: 403, STAFF: 403, OUTSIDER: 404},
    "link a quest": {ANON: LOGIN, LEAD: 303, MAKER: 403, CHECKER: 403, NOBODY: 403,
                     STAFF: 403, OUTSIDER: 404},
    "add a work package": {ANON: LOGIN, LEAD: 303, MAKER: 403, CHECKER: 403, NOBODY: 403,
                           STAFF: 403, OUTSIDER: 404},
    "give a role": {ANON: LOGIN, LEAD: 303, MAKER: 403, CHECKER: 403, NOBODY: 403,
                    STAFF: 403, OUTSIDER: 404},
}  # fmt: skip


@pytest.fixture
def world(workspace, other_workspace, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    ada = person("ada", shop=[Role.ADMIN])
    people = {
        LEAD: ada,
        MAKER: person("mia", shop=[Role.REVIEWER]),
        CHECKER: person("cora", shop=[Role.REVIEWER]),
        NOBODY: person("rita", shop=[Role.REVIEWER]),
        STAFF: person("sam", shop=[Role.REVIEWER]),
        OUTSIDER: person("olga", other=[Role.ADMIN]),
    }
    m1 = services.mission_create(ada, workspace, title="Checkout", key="m1").mission
    services.mission_create(ada, workspace, title="Later", key="m2")
    for who, role in ((MAKER, "maker"), (CHECKER, "checker"), (STAFF, "checker")):
        mission_role_grant(ada, workspace, "m1", people[who].username, role)
    # sam was a reviewer when given the role; now only staff, they read and decide nothing.
    role_revoke(people[STAFF], workspace, Role.REVIEWER)
    role_grant(people[STAFF], workspace, Role.STAFF)
    for n in (1, 2, 3):
        services.wp_add(ada, m1, title=f"part {n}", key=f"add{n}")

    def lead(subject, to, key, evidence=TEXT):
        call = services.mission_transition if subject == "m1" else services.wp_transition
        args = (ada, Mission.objects.get(mission_id="m1")) + (() if subject == "m1" else (subject,))
        return call(*args, to=to, role="lead", evidence=evidence, key=key)

    lead("m1", "planning", "p")
    for wp in ("wp1", "wp2", "wp3"):
        lead(wp, "ready", f"r-{wp}")
    lead("m1", "ready", "r")
    lead("m1", "running", "go")
    upload = SimpleUploadedFile("plan.txt", b"the plan\n")
    lead("wp1", "in_progress", "s1", evidence=Evidence("file", upload=upload))
    lead("wp3", "in_progress", "s3")
    lead("wp3", "failed", "f3")
    drive(workspace, "q9", "hypothesised")
    sha = hashlib.sha256(b"the plan\n").hexdigest()
    return {"people": people, "file_url": f"/missions/shop/evidence/{sha}/plan.txt"}


def _data(kind: str) -> dict:
    head = Mission.objects.get(mission_id="m1").journal_head
    text = {"evidence_kind": "text", "evidence_text": "noted", "seen_head": head}
    return {
        "create": {"workspace": "shop", "title": "New work", "key": "matrix-create"},
        "wp_move": {"subject": "wp1", "to": "checking", "role": "maker", "key": "mx-w", **text},
        "mission_move": {"subject": "m1", "to": "paused", "role": "lead", "key": "mx-m", **text},
        "supersede": {"subject": "wp3", "title": "again", "role": "lead", "key": "mx-s", **text},
        "link": {"wp": "wp2", "quest": "q9", "seen_head": head, "key": "mx-l"},
        "add": {"title": "one more", "key": "mx-a"},
        "grant": {"username": "rita", "role": "debugger", "change": "grant"},
    }[kind]


@pytest.mark.parametrize("who", [ANON, LEAD, MAKER, CHECKER, NOBODY, STAFF, OUTSIDER])
def test_each_person_gets_the_exact_status_on_every_mission_page_and_action(client, world, who):
    if who != ANON:
        client.force_login(world["people"][who])
    got = {}
    for name, (method, path, extra) in COLUMNS.items():
        url = path(world)
        answer = client.get(url) if method == GET else client.post(url, _data(extra))
        got[name] = answer.status_code
        if answer.status_code == LOGIN:
            assert answer["Location"].startswith(reverse("inbox:login")), name
        if answer.status_code == 303:
            assert answer["X-Ephyra-Outcome"] == "applied", (name, who)
        if name == "evidence file" and answer.status_code == 200:
            assert b"".join(answer.streaming_content) == b"the plan\n"
    assert got == {name: cells[who] for name, cells in EXPECTED.items()}


def test_every_mission_url_has_a_column_in_the_matrix():
    from missions import urls

    named = {pattern.name for pattern in urls.urlpatterns}
    covered = {"list", "mission", "evidence", "create", "move", "supersede", "link", "add_wp"}
    covered |= {"roles"}
    assert named <= covered, f"pages without a column: {sorted(named - covered)}"
