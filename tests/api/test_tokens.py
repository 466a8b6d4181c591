"""Personal API tokens: stored as a digest, refused when unknown, revoked or expired, scoped to
their workspaces, capped by their role, rate-limited; made on the dashboard page and with the
command; the session's writes need the CSRF token."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from api.models import ApiToken
from api.tokens import TokenRefused, effective_roles, token_create, token_verify
from ledger.models import AuditEntry
from quests.models import Quest
from quests.roles import Role
from tests.api.conftest import call, token_for
from tests.quests.conftest import drive, person

pytestmark = pytest.mark.django_db


def test_only_a_salted_digest_and_a_prefix_of_a_token_are_stored(workspace):
    ada = person("ada", shop=[Role.ADMIN])
    issued = token_create(ada, workspaces=["shop"], role="admin")
    assert issued.token.startswith("eph_") and len(issued.token) >= 40
    row = ApiToken.objects.get()
    stored = json.dumps([str(v) for v in ApiToken.objects.values().get().values()])
    assert issued.token not in stored and issued.token[12:] not in stored
    assert row.prefix == issued.token[:12]
    assert hashlib.sha256(issued.token.encode()).hexdigest() not in row.digest  # salted
    assert token_verify(issued.token) == row
    assert token_verify(issued.token[:-1] + "x") is None


def test_unknown_revoked_and_expired_tokens_and_other_schemes_are_401(client, workspace):
    ada = person("ada", shop=[Role.ADMIN])
    live = token_for(ada, role="admin")
    assert call(client, "GET", "me", live).status_code == 200
    assert call(client, "GET", "me", "eph_nobodymadethisone0000000000000").status_code == 401
    assert client.get("/api/v1/me", HTTP_AUTHORIZATION="Basic YWRhOnB3").status_code == 401
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert call(client, "GET", "me", live).status_code == 401
    revoked = token_for(ada, role="admin")
    call_command("api_tokens", "revoke", revoked[:12], stdout=io.StringIO())
    answer = call(client, "GET", "me", revoked)
    assert answer.status_code == 401
    assert answer.json()["detail"] == "the token is unknown, revoked or expired"


def test_a_token_reaches_only_the_workspaces_it_names(client, workspace, other_workspace):
    eve = person("eve", shop=[Role.ADMIN], other=[Role.ADMIN])
    drive(workspace, "q1", "hypothesised")
    token = token_for(eve, slugs=("other",), role="admin")
    me = call(client, "GET", "me", token).json()
    assert me["workspaces"] == [{"slug": "other", "roles": ["admin"]}]
    assert call(client, "GET", "workspaces/shop/quests/q1", token).status_code == 404
    assert call(client, "GET", "quests?workspace=shop", token).status_code == 404
    assert call(client, "GET", "quests", token).json()["results"] == []


def test_a_token_role_caps_the_owner_and_the_owner_caps_the_token(client, workspace):
    ada = person("ada", shop=[Role.ADMIN])
    quest = drive(workspace, "q1", "hypothesised")
    reviewer_token = token_for(ada, role="reviewer")
    assert call(client, "GET", "me", reviewer_token).json()["workspaces"][0]["roles"] == [
        "reviewer"
    ]
    answer = call(
        client,
        "POST",
        "workspaces/shop/quests/q1/kill",
        reviewer_token,
        {"head": quest.journal_head, "reason": "dup"},
    )
    assert answer.status_code == 403
    assert call(client, "GET", "workspaces/shop/audit", reviewer_token).status_code == 403
    rita = person("rita", shop=[Role.REVIEWER])
    with pytest.raises(TokenRefused, match="do not cover admin"):
        token_create(rita, workspaces=["shop"], role="admin")
    with pytest.raises(TokenRefused, match="no role in the workspace 'other'"):
        token_create(rita, workspaces=["other"], role="reviewer")
    # An admin token whose owner lost admin acts with what the owner still holds.
    assert effective_roles(frozenset({Role.REVIEWER}), Role.ADMIN) == {Role.REVIEWER}
    assert effective_roles(frozenset({Role.ADMIN}), Role.STAFF) == {Role.STAFF}
    assert effective_roles(frozenset({Role.REVIEWER}), Role.STAFF) == frozenset()


def test_past_the_rate_a_token_gets_429_with_retry_after(client, workspace, settings):
    settings.EPHYRA_API_RATE_LIMIT = 3
    settings.EPHYRA_API_RATE_WINDOW = 60
    token = token_for(person("rita", shop=[Role.REVIEWER]))
    codes = [call(client, "GET", "me", token).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    answer = call(client, "GET", "me", token)
    assert answer.json()["type"].endswith("/api/problems/rate-limited")
    assert 1 <= int(answer["Retry-After"]) <= 60
    other = token_for(person("sam", shop=[Role.STAFF]), role="staff")
    assert call(client, "GET", "me", other).status_code == 200


def test_a_session_write_without_its_csrf_token_is_a_403_problem(workspace):
    rita = person("rita", shop=[Role.REVIEWER])
    quest = drive(workspace, "q1", "hypothesised")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(rita)
    assert browser.get("/api/v1/me").json()["username"] == "rita"
    url = "/api/v1/workspaces/shop/quests/q1/claim"
    body = json.dumps({"head": quest.journal_head})
    answer = browser.post(url, data=body, content_type="application/json")
    assert answer.status_code == 403 and "CSRF" in answer.json()["detail"]
    browser.get("/tokens/")  # a page sets the CSRF cookie
    csrf = browser.cookies["csrftoken"].value
    answer = browser.post(url, data=body, content_type="application/json", HTTP_X_CSRFTOKEN=csrf)
    assert answer.status_code == 202
    assert Quest.objects.get(quest_id="q1").journal_head == quest.journal_head  # queued only


def test_the_page_makes_a_token_shown_once_and_revokes_it(client, workspace):
    ada = person("ada", shop=[Role.ADMIN])
    client.force_login(ada)
    page = client.get("/tokens/")
    assert page.status_code == 200 and "API tokens" in page.content.decode()
    assert 'href="/tokens/"' in client.get("/").content.decode()  # the top bar links it
    made = client.post(
        "/tokens/new", {"workspaces": ["shop"], "role": "admin", "days": 30, "name": "ci"}
    )
    assert made.status_code == 201
    row = ApiToken.objects.get()
    html = made.content.decode()
    token = html.split('id="new-token" class="mono wide" readonly value="')[1].split('"')[0]
    assert token.startswith(row.prefix) and token_verify(token) == row
    assert token not in client.get("/tokens/").content.decode()  # shown once
    assert (row.expires_at - row.created_at).days == 30
    refused = client.post("/tokens/new", {"workspaces": ["shop"], "role": "admin", "days": 400})
    assert refused.status_code == 400 and ApiToken.objects.count() == 1
    gone = client.post(f"/tokens/{row.prefix}/revoke")
    assert gone.status_code == 303
    assert call(client, "GET", "me", token).status_code == 401
    actions = list(AuditEntry.objects.order_by("sequence").values_list("action", "actor"))
    assert actions == [("api_token.created", "person:ada"), ("api_token.revoked", "person:ada")]
    assert token not in json.dumps(list(AuditEntry.objects.values_list("payload", flat=True)))


def test_the_command_creates_lists_and_revokes_tokens(client, workspace):
    person("ada", shop=[Role.ADMIN])
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "api_tokens",
        "create",
        "ada",
        "--workspace",
        "shop",
        "--role",
        "staff",
        "--days",
        "7",
        stdout=out,
        stderr=err,
    )
    token = out.getvalue().strip()
    assert token.startswith("eph_") and "shown once" in err.getvalue()
    assert call(client, "GET", "me", token).json()["workspaces"][0]["roles"] == ["staff"]
    listing = io.StringIO()
    call_command("api_tokens", "list", stdout=listing)
    assert token[:12] in listing.getvalue() and token not in listing.getvalue()
    assert "live" in listing.getvalue()
    call_command("api_tokens", "revoke", token[:12], stdout=io.StringIO())
    with pytest.raises(CommandError, match="already revoked"):
        call_command("api_tokens", "revoke", token[:12], stdout=io.StringIO())
    with pytest.raises(CommandError, match="a token lives 1 to 366 days"):
        call_command(
            "api_tokens",
            "create",
            "ada",
            "--workspace",
            "shop",
            "--days",
            "999",
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    assert ApiToken.objects.count() == 1
    assert AuditEntry.objects.filter(action__startswith="api_token.").count() == 2
