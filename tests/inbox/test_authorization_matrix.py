"""Every role, every page and action, own or another workspace: each cell an exact status.

Rows are the people: nobody logged in, a reviewer, an admin and a staff member of ``shop``, and
an admin of ``other`` only. Columns are the dashboard's pages (GET) and actions (POST), each on
``shop``'s objects. A new page or action gets a column here, or this test says it is missing."""

from __future__ import annotations

import pygit2
import pytest
from django.urls import reverse

from ledger.models import Operation
from quests.models import Quest
from quests.roles import Role
from tests.quests.conftest import drive, person

pytestmark = pytest.mark.django_db

ANON, REVIEWER, ADMIN, STAFF, OUTSIDER = "anonymous", "reviewer", "admin", "staff", "outsider"
LOGIN = 302

# (name, method, path builder, data builder): paths and data take the fixture's world.
GET, POST = "GET", "POST"
COLUMNS = {
    "inbox": (GET, lambda w: "/", None),
    "inbox live region": (GET, lambda w: "/?tab=all", "htmx"),
    "quest page": (GET, lambda w: f"/q/shop/{w['quest']}/", None),
    "quest live region": (GET, lambda w: f"/q/shop/{w['quest']}/", "htmx"),
    "source file": (GET, lambda w: f"/w/shop/source/{w['commit']}/app/cart.py", None),
    "ledger": (GET, lambda w: "/ledger/", None),
    "audit trail": (GET, lambda w: "/audit/", None),
    "lifecycle": (GET, lambda w: "/lifecycle/", None),
    "claim": (POST, lambda w: f"/q/shop/{w['quest']}/act", "claim"),
    "comment": (POST, lambda w: f"/q/shop/{w['quest']}/act", "comment"),
    "kill": (POST, lambda w: f"/q/shop/{w['quest']}/act", "kill"),
    "resolve": (POST, lambda w: "/ledger/resolve", "resolve"),
    "verify chain": (POST, lambda w: "/audit/verify", "verify"),
}
# The exact status of each cell. 303 is the post/redirect/get of an action taken or refused by
# the machine; 403 a role that does not allow it; 404 another workspace's object.
EXPECTED = {
    "inbox": {ANON: LOGIN, REVIEWER: 200, ADMIN: 200, STAFF: 200, OUTSIDER: 200},
    "inbox live region": {ANON: LOGIN, REVIEWER: 200, ADMIN: 200, STAFF: 200, OUTSIDER: 200},
    "quest page": {ANON: LOGIN, REVIEWER: 200, ADMIN: 200, STAFF: 200, OUTSIDER: 404},
    "quest live region": {ANON: LOGIN, REVIEWER: 200, ADMIN: 200, STAFF: 200, OUTSIDER: 404},
    "source file": {ANON: LOGIN, REVIEWER: 200, ADMIN: 200, STAFF: 200, OUTSIDER: 404},
    "ledger": {ANON: LOGIN, REVIEWER: 200, ADMIN: 200, STAFF: 200, OUTSIDER: 200},
    "audit trail": {ANON: LOGIN, REVIEWER: 403, ADMIN: 200, STAFF: 200, OUTSIDER: 200},
    "lifecycle": {ANON: LOGIN, REVIEWER: 200, ADMIN: 200, STAFF: 200, OUTSIDER: 200},
    "claim": {ANON: LOGIN, REVIEWER: 303, ADMIN: 303, STAFF: 403, OUTSIDER: 404},
    "comment": {ANON: LOGIN, REVIEWER: 303, ADMIN: 303, STAFF: 403, OUTSIDER: 404},
    "kill": {ANON: LOGIN, REVIEWER: 403, ADMIN: 303, STAFF: 403, OUTSIDER: 404},
    "resolve": {ANON: LOGIN, REVIEWER: 403, ADMIN: 303, STAFF: 403, OUTSIDER: 404},
    "verify chain": {ANON: LOGIN, REVIEWER: 403, ADMIN: 303, STAFF: 303, OUTSIDER: 404},
}


@pytest.fixture
def world(workspace, other_workspace, settings):
    settings.EPHYRA_ACTION_WAIT_MS = 0
    quest = drive(workspace, "q1", "hypothesised")
    drive(other_workspace, "o1", "hypothesised")
    # A commit in shop's mirror, for the source page.
    repo = pygit2.Repository(workspace.repository)
    blob = repo.create_blob(b"def total(cart):\n    return sum(cart)\n")
    app = repo.TreeBuilder()
    app.insert("cart.py", blob, pygit2.GIT_FILEMODE_BLOB)
    root = repo.TreeBuilder()
    root.insert("app", app.write(), pygit2.GIT_FILEMODE_TREE)
    who = pygit2.Signature("t", "t@example.com")
    commit = repo.create_commit("refs/heads/main", who, who, "cart", root.write(), [])
    ambiguous = Operation.objects.filter(workspace=workspace).first()
    Operation.objects.filter(pk=ambiguous.pk).update(state=Operation.State.AMBIGUOUS)
    people = {
        REVIEWER: person("rita", shop=[Role.REVIEWER]),
        ADMIN: person("ada", shop=[Role.ADMIN]),
        STAFF: person("sam", shop=[Role.STAFF]),
        OUTSIDER: person("olga", other=[Role.ADMIN]),
    }
    return {"quest": quest.quest_id, "commit": str(commit), "op": ambiguous, "people": people}


def _data(kind: str, world: dict) -> dict:
    quest = Quest.objects.get(quest_id=world["quest"])
    seen = {"seen_head": quest.journal_head, "seen_revision": quest.revision}
    return {
        "claim": {"action": "claim", "key": "m-claim", **seen},
        "comment": {"action": "comment", "key": "m-comment", "text": "hello"},
        "kill": {"action": "kill", "key": "m-kill", "text": "duplicate", **seen},
        "resolve": {
            "workspace": "shop",
            "key": world["op"].key,
            "verdict": "succeeded",
            "note": "it is on main",
            "token": "m-resolve",
        },
        "verify": {"workspace": "shop"},
    }[kind]


@pytest.mark.parametrize("who", [ANON, REVIEWER, ADMIN, STAFF, OUTSIDER])
def test_each_role_gets_the_exact_status_on_every_page_and_action(client, world, who):
    if who != ANON:
        client.force_login(world["people"][who])
    got = {}
    for name, (method, path, extra) in COLUMNS.items():
        url = path(world)
        if method == GET:
            headers = {"HTTP_HX_REQUEST": "true"} if extra == "htmx" else {}
            answer = client.get(url, **headers)
        else:
            answer = client.post(url, _data(extra, world))
        got[name] = answer.status_code
        if answer.status_code == LOGIN:
            assert answer["Location"].startswith(reverse("inbox:login")), name
    assert got == {name: cells[who] for name, cells in EXPECTED.items()}


def test_every_dashboard_url_has_a_column_in_the_matrix():
    from inbox import urls

    named = {pattern.name for pattern in urls.urlpatterns} - {"login", "logout"}
    covered = {"inbox", "quest", "act", "source", "ledger", "ledger_resolve", "audit"}
    covered |= {"audit_verify"}
    assert named <= covered, f"pages without a column: {sorted(named - covered)}"
