"""The ledger, the audit trail and the policy through the API."""

from __future__ import annotations

import pytest

from ephyra.policy import DEFAULT_POLICY_PATH
from ledger.models import AuditEntry, InboundEvent, Operation
from quests.models import PolicyProposal, Workspace
from quests.roles import Role
from tests.api.conftest import call, token_for
from tests.audit_tampering import audit_triggers_disabled
from tests.quests.conftest import drive, person, work

pytestmark = pytest.mark.django_db
POLICY = DEFAULT_POLICY_PATH.read_text()


@pytest.fixture
def admins(workspace):
    return person("ada", shop=[Role.ADMIN]), person("lena", shop=[Role.ADMIN])


def test_the_ledger_lists_operations_and_an_admin_settles_an_ambiguous_one(
    client, workspace, admins
):
    drive(workspace, "q1", "hypothesised")
    op = Operation.objects.filter(workspace=workspace).order_by("pk").first()
    Operation.objects.filter(pk=op.pk).update(state=Operation.State.AMBIGUOUS)
    token = token_for(admins[0], role="admin")
    listed = call(client, "GET", "workspaces/shop/ledger?state=ambiguous", token).json()
    assert [o["key"] for o in listed["results"]] == [op.key]
    walked, cursor = [], None
    while True:
        url = "workspaces/shop/ledger?limit=1" + (f"&cursor={cursor}" if cursor else "")
        page = call(client, "GET", url, token).json()
        walked += [o["key"] for o in page["results"]]
        if not (cursor := page["next"]):
            break
    assert walked == list(Operation.objects.order_by("-pk").values_list("key", flat=True))
    url = f"workspaces/shop/ledger/{op.key}/resolve"
    answer = call(client, "POST", url, token, {"verdict": "done", "note": "it is on main"})
    assert answer.status_code == 202 and answer.json()["verdict"] == "succeeded"
    work(workspace)
    assert Operation.objects.get(pk=op.pk).state == Operation.State.SUCCEEDED
    again = call(client, "POST", url, token, {"verdict": "dead", "note": "changed my mind"})
    assert again.status_code == 422 and "only ambiguous or dead" in again.json()["reason"]
    bad = call(client, "POST", url, token, {"verdict": "maybe", "note": ""})
    assert bad.status_code == 400 and set(bad.json()["errors"]) == {"verdict", "note"}


def test_the_audit_trail_reads_and_verifies_and_a_tampered_chain_is_named(
    client, workspace, admins
):
    token = token_for(admins[0], role="admin")
    call(client, "POST", "workspaces/shop/policy/proposals", token, {"text": POLICY + "\n"})
    entries = call(client, "GET", "workspaces/shop/audit", token).json()["results"]
    assert [e["action"] for e in entries][:2] == ["policy.proposed", "api_token.created"]
    verdict = call(client, "POST", "workspaces/shop/audit/verify", token).json()
    assert verdict == {"ok": True, "entries": 2, "first_bad": None, "problem": ""}
    with audit_triggers_disabled():
        AuditEntry.objects.filter(sequence=1).update(payload={"prefix": "forged"})
    verdict = call(client, "POST", "workspaces/shop/audit/verify", token).json()
    assert verdict["ok"] is False and verdict["first_bad"] == 1 and verdict["problem"]


def test_a_policy_goes_current_only_with_four_eyes(client, workspace, admins):
    ada, lena = (token_for(a, role="admin") for a in admins)
    bad = call(client, "POST", "workspaces/shop/policy/proposals", ada, {"text": "version: 9\n"})
    assert bad.status_code == 400 and bad.json()["errors"]["text"]
    proposed = call(
        client,
        "POST",
        "workspaces/shop/policy/proposals",
        ada,
        {"text": POLICY + "\n", "note": "the default"},
    )
    assert proposed.status_code == 201
    pid = proposed.json()["id"]
    own = call(client, "POST", f"workspaces/shop/policy/proposals/{pid}/approve", ada)
    assert own.status_code == 403 and "four eyes" in own.json()["detail"]
    assert Workspace.objects.get(slug="shop").policy_id is None
    approved = call(client, "POST", f"workspaces/shop/policy/proposals/{pid}/approve", lena)
    assert approved.status_code == 200 and approved.json()["state"] == "approved"
    versions = call(client, "GET", "workspaces/shop/policy/versions", lena).json()
    assert [(v["number"], v["current"]) for v in versions["results"]] == [(1, True)]
    text = call(client, "GET", "workspaces/shop/policy/versions/1", lena).json()["text"]
    assert text == POLICY + "\n"
    assert call(client, "GET", "workspaces/shop/policy/versions/2", lena).status_code == 404
    second = call(
        client, "POST", "workspaces/shop/policy/proposals", lena, {"text": POLICY + "\n\n"}
    ).json()["id"]
    refused = call(client, "POST", f"workspaces/shop/policy/proposals/{second}/withdraw", ada)
    assert refused.status_code == 422 and "only lena" in refused.json()["reason"]
    withdrawn = call(
        client,
        "POST",
        f"workspaces/shop/policy/proposals/{second}/withdraw",
        lena,
        {"reason": "typo"},
    )
    assert withdrawn.json()["state"] == "withdrawn"
    assert PolicyProposal.objects.filter(state="open").count() == 0
    assert not InboundEvent.objects.exists()
