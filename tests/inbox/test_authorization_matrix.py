"""Every role, every page and action, own or another workspace: each cell an exact status.

Rows are the people: nobody logged in, a reviewer, an admin and a staff member of ``shop``, and
an admin of ``other`` only. Columns are the dashboard's pages (GET) and actions (POST), each on
``shop``'s objects. A new page or action gets a column here, or this test says it is missing."""

from __future__ import annotations

import uuid

import pygit2
import pytest
from django.urls import reverse

from ephyra.policy import DEFAULT_POLICY_PATH
from intake.hooks.services import hook_register
from intake.otlp.tokens import token_create
from ledger.models import Operation
from quests.models import Quest
from quests.policies import policy_propose, policy_version_add
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
    "workspaces": (GET, lambda w: "/workspaces/", None),
    "workspace page": (GET, lambda w: "/w/shop/", None),
    "policy page": (GET, lambda w: "/w/shop/policy/", None),
    "add workspace": (POST, lambda w: "/workspaces/add", "workspace_add"),
    "make a token": (POST, lambda w: "/w/shop/tokens", "token"),
    "revoke a token": (POST, lambda w: f"/w/shop/tokens/{w['token']}/revoke", "empty"),
    "register a hook": (POST, lambda w: "/w/shop/hooks", "hook"),
    "disable a hook": (POST, lambda w: "/w/shop/hooks/github/disable", "empty"),
    "propose a policy": (POST, lambda w: "/w/shop/policy/propose", "policy"),
    "propose a version": (POST, lambda w: "/w/shop/policy/propose-version", "version"),
    "withdraw a proposal": (POST, lambda w: f"/w/shop/policy/{w['proposal']}/withdraw", "empty"),
    "reject a proposal": (POST, lambda w: f"/w/shop/policy/{w['proposal']}/reject", "reject"),
    "approve a proposal": (POST, lambda w: f"/w/shop/policy/{w['proposal']}/approve", "empty"),
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
    "workspaces": {ANON: LOGIN, REVIEWER: 200, ADMIN: 200, STAFF: 200, OUTSIDER: 200},
    "workspace page": {ANON: LOGIN, REVIEWER: 403, ADMIN: 200, STAFF: 403, OUTSIDER: 404},
    "policy page": {ANON: LOGIN, REVIEWER: 403, ADMIN: 200, STAFF: 403, OUTSIDER: 404},
    # Adding a workspace takes Django's add-workspace permission (or a superuser), not a role.
    "add workspace": {ANON: LOGIN, REVIEWER: 403, ADMIN: 403, STAFF: 403, OUTSIDER: 403},
    # 201: the answer shows the new secret once, instead of redirecting to a page that cannot.
    "make a token": {ANON: LOGIN, REVIEWER: 403, ADMIN: 201, STAFF: 403, OUTSIDER: 404},
    "revoke a token": {ANON: LOGIN, REVIEWER: 403, ADMIN: 303, STAFF: 403, OUTSIDER: 404},
    "register a hook": {ANON: LOGIN, REVIEWER: 403, ADMIN: 201, STAFF: 403, OUTSIDER: 404},
    "disable a hook": {ANON: LOGIN, REVIEWER: 403, ADMIN: 303, STAFF: 403, OUTSIDER: 404},
    # 409: another admin's proposal is open, so this one is refused with the reason.
    "propose a policy": {ANON: LOGIN, REVIEWER: 403, ADMIN: 409, STAFF: 403, OUTSIDER: 404},
    "propose a version": {ANON: LOGIN, REVIEWER: 403, ADMIN: 303, STAFF: 403, OUTSIDER: 404},
    "withdraw a proposal": {ANON: LOGIN, REVIEWER: 403, ADMIN: 303, STAFF: 403, OUTSIDER: 404},
    "reject a proposal": {ANON: LOGIN, REVIEWER: 403, ADMIN: 303, STAFF: 403, OUTSIDER: 404},
    "approve a proposal": {ANON: LOGIN, REVIEWER: 403, ADMIN: 303, STAFF: 403, OUTSIDER: 404},
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
    second_admin = person("ada2", shop=[Role.ADMIN])
    token, _ = token_create(workspace, name="existing")
    hook_register(second_admin, workspace, "github")
    proposal = policy_propose(second_admin, workspace, DEFAULT_POLICY_PATH.read_text() + "\n")
    earlier = policy_version_add(workspace, "version: 1\n", reviewed_by="setup")
    people = {
        REVIEWER: person("rita", shop=[Role.REVIEWER]),
        ADMIN: person("ada", shop=[Role.ADMIN]),
        STAFF: person("sam", shop=[Role.STAFF]),
        OUTSIDER: person("olga", other=[Role.ADMIN]),
    }
    return {
        "quest": quest.quest_id,
        "commit": str(commit),
        "op": ambiguous,
        "people": people,
        "token": token.pk,
        "proposal": proposal.pk,
        "version": earlier.pk,
        "source": workspace.remote or workspace.repository,
    }


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
        "empty": {},
        "workspace_add": {"slug": "new", "source": world["source"], "base_branch": "main"},
        # Fresh one-time keys: a used key is remembered beyond the test's database.
        "token": {"key": uuid.uuid4().hex, "name": "ci"},
        "hook": {"key": uuid.uuid4().hex, "kind": "gitea"},
        "policy": {"text": "version: 1\nproof: {attempts: 2}\n", "intent": "propose"},
        "version": {"version": world["version"]},
        "reject": {"reason": "not now"},
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
    covered |= {"audit_verify", "workspaces", "workspace_add", "workspace", "token_create"}
    covered |= {"token_revoke", "hook_create", "hook_change", "policy", "policy_propose"}
    covered |= {"policy_propose_version", "policy_approve", "policy_reject", "policy_withdraw"}
    assert named <= covered, f"pages without a column: {sorted(named - covered)}"
