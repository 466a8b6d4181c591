"""Every kind of caller by every endpoint of /api/v1/: each cell an exact status.

Rows are the callers: nobody, a token nobody made, an expired token, and live tokens of a
reviewer, a staff member and an admin of ``shop``, and a token of an admin of both workspaces
that names only ``other``. Columns are the endpoints, each on ``shop``'s objects, taken in
order (a write changes what the next one finds, the same way for every caller). A new
endpoint gets a column here, or ``test_every_api_url_has_a_column`` says it is missing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from api.models import ApiToken
from ephyra.policy import DEFAULT_POLICY_PATH
from ledger.models import Operation
from missions import services
from missions.roles import mission_role_grant
from quests.models import Quest
from quests.policies import policy_propose
from quests.roles import Role
from tests.api.conftest import call, token_for
from tests.quests.conftest import drive, person

pytestmark = pytest.mark.django_db

ANON, BAD, EXPIRED = "anonymous", "bad token", "expired token"
REVIEWER, STAFF, ADMIN, ELSEWHERE = "reviewer", "staff", "admin", "token for another workspace"
CALLERS = [ANON, BAD, EXPIRED, REVIEWER, STAFF, ADMIN, ELSEWHERE]
W = "workspaces/shop"
Q = f"{W}/quests/q1"
M = f"{W}/missions/m1"


def head() -> dict:
    return {"head": Quest.objects.get(quest_id="q1").journal_head}


# name: (url name, method, path, body builder)
COLUMNS = {
    "me": ("me", "GET", "me", None),
    "workspaces": ("workspaces", "GET", "workspaces", None),
    "workspace": ("workspace", "GET", W, None),
    "quests across": ("quests_across", "GET", "quests?workspace=shop", None),
    "quests": ("quests", "GET", f"{W}/quests", None),
    "quest": ("quest", "GET", Q, None),
    "claim": ("quest_claim", "POST", f"{Q}/claim", head),
    "release": ("quest_release", "POST", f"{Q}/release", head),
    "decide": (
        "quest_decide",
        "POST",
        f"{Q}/decide",
        lambda: {**head(), "checkpoint": "A", "decision": "approve"},
    ),
    "comment": ("quest_comment", "POST", f"{Q}/comment", lambda: {"body": "looks right"}),
    "pause": ("quest_pause", "POST", f"{Q}/pause", lambda: {**head(), "reason": "wait"}),
    "resume": ("quest_resume", "POST", f"{Q}/resume", head),
    "kill": ("quest_kill", "POST", f"{Q}/kill", lambda: {**head(), "reason": "duplicate"}),
    "events": (
        "quest_events",
        "POST",
        f"{Q}/events",
        lambda: {"id": "ext-1", "at": "2026-01-06T00:00:00Z", "type": "watch_clean", "actor": "ci"},
    ),
    "ledger": ("ledger", "GET", f"{W}/ledger", None),
    "resolve": ("ledger_resolve", "POST", None, lambda: {"verdict": "done", "note": "on main"}),
    "audit": ("audit", "GET", f"{W}/audit", None),
    "verify": ("audit_verify", "POST", f"{W}/audit/verify", None),
    "policy versions": ("policy_versions", "GET", f"{W}/policy/versions", None),
    "policy version": ("policy_version", "GET", f"{W}/policy/versions/1", None),
    "propose": (
        "policy_propose",
        "POST",
        f"{W}/policy/proposals",
        lambda: {"text": "version: 1\nproof: {attempts: 2}\n"},
    ),
    "withdraw": ("policy_withdraw", "POST", "PROPOSAL/withdraw", lambda: {"reason": "no"}),
    "approve": ("policy_approve", "POST", "PROPOSAL/approve", None),
    "reject": ("policy_reject", "POST", "PROPOSAL/reject", lambda: {"reason": "no"}),
    "missions": ("missions", "GET", f"{W}/missions", None),
    "create mission": ("missions", "POST", f"{W}/missions", lambda: {"title": "Another"}),
    "mission": ("mission", "GET", M, None),
    "mission transition": (
        "mission_transition",
        "POST",
        f"{M}/transition",
        lambda: {"to": "planning", "role": "lead", "evidence": {"mission_brief": "docs/brief.md"}},
    ),
    "add wp": ("wp_add", "POST", f"{M}/wps", lambda: {"title": "Prove"}),
    "wp transition": (
        "wp_transition",
        "POST",
        f"{M}/wps/wp1/transition",
        lambda: {"to": "ready", "role": "lead", "evidence": {"kind": "text", "text": "plan v1"}},
    ),
    "supersede wp": (
        "wp_supersede",
        "POST",
        f"{M}/wps/wp1/supersede",
        lambda: {"title": "Again", "role": "lead", "evidence": {"kind": "text", "text": "why"}},
    ),
    "link quest": ("wp_link", "POST", f"{M}/wps/wp1/quest", lambda: {"quest": "q1"}),
    "upload evidence": ("evidence_upload", "UPLOAD", f"{M}/evidence", None),
}
UNAUTHENTICATED = dict.fromkeys(COLUMNS, 401)
# 202: queued for the worker (none runs here); 422: the machine (or a proposal's state)
# refuses; 403: the role does not allow it; 404: not revealed (another workspace's).
EXPECTED = {
    ANON: UNAUTHENTICATED,
    BAD: UNAUTHENTICATED,
    EXPIRED: UNAUTHENTICATED,
    REVIEWER: {
        "me": 200,
        "workspaces": 200,
        "workspace": 200,
        "quests across": 200,
        "quests": 200,
        "quest": 200,
        "claim": 202,
        "release": 422,
        "decide": 202,
        "comment": 202,
        "pause": 202,
        "resume": 422,
        "kill": 403,
        "events": 403,
        "ledger": 200,
        "resolve": 403,
        "audit": 403,
        "verify": 403,
        "policy versions": 403,
        "policy version": 403,
        "propose": 403,
        "withdraw": 403,
        "approve": 403,
        "reject": 403,
        "missions": 200,
        "create mission": 403,
        "mission": 200,
        "mission transition": 403,
        "add wp": 403,
        "wp transition": 403,
        "supersede wp": 403,
        "link quest": 403,
        "upload evidence": 201,
    },
    STAFF: {
        "me": 200,
        "workspaces": 200,
        "workspace": 200,
        "quests across": 200,
        "quests": 200,
        "quest": 200,
        "claim": 403,
        "release": 403,
        "decide": 403,
        "comment": 403,
        "pause": 403,
        "resume": 403,
        "kill": 403,
        "events": 403,
        "ledger": 200,
        "resolve": 403,
        "audit": 200,
        "verify": 200,
        "policy versions": 403,
        "policy version": 403,
        "propose": 403,
        "withdraw": 403,
        "approve": 403,
        "reject": 403,
        "missions": 200,
        "create mission": 403,
        "mission": 200,
        "mission transition": 403,
        "add wp": 403,
        "wp transition": 403,
        "supersede wp": 403,
        "link quest": 403,
        "upload evidence": 403,
    },
    ADMIN: {
        "me": 200,
        "workspaces": 200,
        "workspace": 200,
        "quests across": 200,
        "quests": 200,
        "quest": 200,
        "claim": 202,
        "release": 422,
        "decide": 202,
        "comment": 202,
        "pause": 202,
        "resume": 422,
        "kill": 202,
        "events": 202,
        "ledger": 200,
        "resolve": 202,
        "audit": 200,
        "verify": 200,
        "policy versions": 200,
        "policy version": 200,
        "propose": 422,
        "withdraw": 422,
        "approve": 200,
        "reject": 422,
        "missions": 200,
        "create mission": 201,
        "mission": 200,
        "mission transition": 200,
        "add wp": 201,
        "wp transition": 200,
        "supersede wp": 422,
        "link quest": 200,
        "upload evidence": 201,
    },
    ELSEWHERE: {
        **{name: 404 for name in COLUMNS},
        "me": 200,
        "workspaces": 200,
        "quests across": 404,
    },
}


@pytest.fixture
def world(workspace, other_workspace):
    drive(workspace, "q1", "hypothesised")
    drive(other_workspace, "o1", "hypothesised")
    op = Operation.objects.filter(workspace=workspace).first()
    Operation.objects.filter(pk=op.pk).update(state=Operation.State.AMBIGUOUS)
    lead = person("lena", shop=[Role.ADMIN])
    proposal = policy_propose(lead, workspace, DEFAULT_POLICY_PATH.read_text() + "\n")
    done = services.mission_create(lead, workspace, title="Checkout", key="m1")
    services.wp_add(lead, done.mission, title="Reproduce", key="wp1")
    people = {
        REVIEWER: person("rita", shop=[Role.REVIEWER]),
        STAFF: person("sam", shop=[Role.STAFF]),
        ADMIN: person("ada", shop=[Role.ADMIN]),
        ELSEWHERE: person("eve", shop=[Role.ADMIN], other=[Role.ADMIN]),
    }
    mission_role_grant(lead, workspace, "m1", "ada", "lead")
    mission_role_grant(lead, workspace, "m1", "rita", "maker")
    tokens = {
        ANON: None,
        BAD: "eph_" + "x" * 40,
        REVIEWER: token_for(people[REVIEWER], role="reviewer"),
        STAFF: token_for(people[STAFF], role="staff"),
        ADMIN: token_for(people[ADMIN], role="admin"),
        ELSEWHERE: token_for(people[ELSEWHERE], slugs=("other",), role="admin"),
    }
    tokens[EXPIRED] = token_for(people[ADMIN], role="admin")
    ApiToken.objects.filter(prefix=tokens[EXPIRED][:12]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    return {"tokens": tokens, "op": op.key, "proposal": proposal.pk}


def _path(name: str, path: str | None, world: dict) -> str:
    if name == "resolve":
        return f"{W}/ledger/{world['op']}/resolve"
    return path.replace("PROPOSAL", f"{W}/policy/proposals/{world['proposal']}")


@pytest.mark.parametrize("who", CALLERS)
def test_each_caller_gets_the_exact_status_on_every_endpoint(client, world, who):
    token = world["tokens"][who]
    got = {}
    for name, (_, method, path, body) in COLUMNS.items():
        url = _path(name, path, world)
        if method == "UPLOAD":
            upload = SimpleUploadedFile("log.txt", b"the log", content_type="text/plain")
            headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
            answer = client.post(f"/api/v1/{url}", {"file": upload}, **headers)
        else:
            answer = call(client, method, url, token, body() if body else None)
        got[name] = answer.status_code
        if answer.status_code >= 400:
            assert answer["Content-Type"] == "application/problem+json", name
            assert answer.json()["status"] == answer.status_code, name
    assert got == EXPECTED[who]


def test_an_unauthenticated_answer_names_the_bearer_scheme(client, world):
    answer = call(client, "GET", "me")
    assert answer.status_code == 401
    assert answer["WWW-Authenticate"] == 'Bearer realm="api"'
    assert answer.json()["type"] == "http://testserver/api/problems/not-authenticated"


def test_every_api_url_has_a_column():
    from api import urls

    named = {pattern.name for pattern in urls.v1}
    covered = {url_name for url_name, *_ in COLUMNS.values()}
    assert named == covered, f"endpoints without a column: {sorted(named - covered)}"
