"""Missions through the API: the seed's scenarios, each move a request a script would send."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from missions.journal import mission_journal
from missions.models import Mission, WorkPackage
from missions.roles import mission_role_grant
from quests.roles import Role
from quests.workspaces import workspace_journal
from tests.api.conftest import call, token_for
from tests.quests.conftest import drive, person

pytestmark = pytest.mark.django_db
M = "workspaces/shop/missions"
PEOPLE = {"mia": "maker", "cora": "checker", "hugo": "human"}


@pytest.fixture
def tokens(workspace):
    ada = person("ada", shop=[Role.ADMIN])
    made = {"ada": token_for(ada, role="admin")}
    for name in PEOPLE:
        made[name] = token_for(person(name, shop=[Role.REVIEWER]))
    return made


def move(client, token, mission: str, to: str, role: str, evidence, *, wp: str = "", **more):
    path = f"{M}/{mission}/wps/{wp}/transition" if wp else f"{M}/{mission}/transition"
    body = {"to": to, "role": role, "evidence": evidence, **more}
    return call(client, "POST", path, token, body)


def ok(answer) -> dict:
    assert answer.status_code in (200, 201), answer.json()
    return answer.json()


@pytest.fixture
def running(client, workspace, tokens):
    """m1, created by ada (its lead) through the API, with three WPs each carried by a quest
    with its proof, the mission RUNNING and each WP READY."""
    ada = tokens["ada"]
    created = ok(call(client, "POST", M, ada, {"title": "Checkout revamp"}))
    assert created["mission"]["id"] == "m1" and created["mission"]["roles"] == ["lead"]
    for name, role in PEOPLE.items():
        mission_role_grant(person_of("ada"), workspace, "m1", name, role)
    for title in ("Reproduce", "Fix", "Prove"):
        ok(call(client, "POST", f"{M}/m1/wps", ada, {"title": title}))
    ok(move(client, ada, "m1", "planning", "lead", {"mission_brief": "docs/checkout.md"}))
    for n in (1, 2, 3):
        drive(workspace, f"q{n}", "ready")
        ok(call(client, "POST", f"{M}/m1/wps/wp{n}/quest", ada, {"quest": f"q{n}"}))
        ok(
            move(
                client, ada, "m1", "ready", "lead", {"kind": "text", "text": "plan v1"}, wp=f"wp{n}"
            )
        )
    ok(move(client, ada, "m1", "ready", "lead", {"plan_validated": "plan v1 validated"}))
    ok(move(client, ada, "m1", "running", "lead", {"start_approved": "go"}))
    return "m1"


def person_of(name: str):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username=name)


def test_a_mission_of_three_quest_carried_work_packages_goes_to_completed(
    client, workspace, tokens, running
):
    ada, mia, cora = tokens["ada"], tokens["mia"], tokens["cora"]
    for n in (1, 2, 3):
        wp = f"wp{n}"
        ok(move(client, ada, running, "in_progress", "lead", {"start_approved": "q"}, wp=wp))
        offers = ok(call(client, "GET", f"{M}/m1", mia))["work_packages"][n - 1]["offers"]
        assert [(o["to"], o["roles"]) for o in offers] == [("checking", ["maker"])]
        ok(move(client, mia, running, "checking", "maker", {"kind": "proof"}, wp=wp))
        ok(move(client, cora, running, "done", "checker", {"check_passed": "green"}, wp=wp))
    ok(move(client, ada, running, "review", "lead", {"wp_done_milestone": "all three"}))
    done = ok(move(client, cora, running, "completed", "checker", {"all_wps_passed": "ok"}))
    assert done["mission"]["state"] == "completed"
    assert done["mission"]["wp_counts"] == {"done": 3}
    assert [w["state"] for w in done["mission"]["work_packages"]] == ["done"] * 3
    cited = {
        s.request["subject"]: s.request["evidence"]["result_produced"]
        for s in mission_journal(workspace).history("m1")
        if s.request.get("to") == "checking"
    }
    for n in (1, 2, 3):
        raw = workspace_journal(workspace).read(f"q{n}", "proof/bundle.json")
        assert cited[f"wp{n}"]["digest"] == json.loads(raw)["digest"]
    listed = ok(call(client, "GET", M, cora))["results"]
    assert [(m["id"], m["state"]) for m in listed] == [("m1", "completed")]


def test_a_maker_checking_their_own_work_package_is_refused_with_the_machines_reason(
    client, workspace, tokens, running
):
    mission_role_grant(person_of("ada"), workspace, "m1", "mia", "checker")
    ada, mia = tokens["ada"], tokens["mia"]
    ok(move(client, ada, running, "in_progress", "lead", {"start_approved": "go"}, wp="wp1"))
    ok(move(client, mia, running, "checking", "maker", {"result_produced": "mine"}, wp="wp1"))
    head = Mission.objects.get(mission_id="m1").journal_head
    answer = move(client, mia, running, "done", "checker", {"check_passed": "fine"}, wp="wp1")
    assert answer.status_code == 422
    assert answer.json()["reason"] == (
        "checker independence: 'mia' produced work package 'wp1' and may not pass its check"
    )
    assert Mission.objects.get(mission_id="m1").journal_head == head
    assert WorkPackage.objects.get(wp_id="wp1").state == "checking"


def test_a_lead_cancelling_is_refused_and_a_human_cancels(client, workspace, tokens, running):
    ada = tokens["ada"]
    answer = move(client, ada, running, "cancelled", "lead", {"cancel_order": "stop"})
    assert answer.status_code == 422
    assert answer.json()["reason"] == "forbidden: only a human may cancel a mission"
    answer = move(client, ada, running, "cancelled", "human", {"cancel_order": "stop"})
    assert answer.status_code == 403  # a role she does not hold is not the machine's refusal
    assert Mission.objects.get(mission_id="m1").state == "running"
    done = ok(move(client, tokens["hugo"], running, "cancelled", "human", {"cancel_order": "#12"}))
    assert done["mission"]["state"] == "cancelled"


def test_an_uploaded_file_is_evidence_by_its_digest_and_a_stale_head_is_a_409(
    client, workspace, tokens, running
):
    ada = tokens["ada"]
    content = b"trace: the vendor answers 410\n"
    upload = SimpleUploadedFile("trace.txt", content, content_type="text/plain")
    answer = client.post(
        f"/api/v1/{M}/m1/evidence", {"file": upload}, HTTP_AUTHORIZATION=f"Bearer {ada}"
    )
    assert answer.status_code == 201
    sha = hashlib.sha256(content).hexdigest()
    assert answer.json() == {"sha256": sha, "size": len(content), "name": "trace.txt"}
    head = Mission.objects.get(mission_id="m1").journal_head
    ok(move(client, ada, running, "in_progress", "lead", {"start_approved": "go"}, wp="wp1"))
    stale = move(
        client,
        ada,
        running,
        "blocked",
        "lead",
        {"kind": "file", "sha256": sha, "name": "trace.txt"},
        wp="wp1",
        head=head,
    )
    assert stale.status_code == 409
    now = Mission.objects.get(mission_id="m1")
    assert stale.json()["head"] == now.journal_head and stale.json()["state"] == "running"
    blocked = ok(
        move(
            client,
            ada,
            running,
            "blocked",
            "lead",
            {"kind": "file", "sha256": sha, "name": "trace.txt"},
            wp="wp1",
            head=now.journal_head,
        )
    )
    wp1 = blocked["mission"]["work_packages"][0]
    assert wp1["state"] == "blocked"
    item = mission_journal(workspace).load("m1").request["evidence"]["block_documented"]
    assert (item["kind"], item["sha256"], item["size"]) == ("file", sha, len(content))
    missing = move(
        client, ada, running, "in_progress", "lead", {"kind": "file", "sha256": "0" * 64}, wp="wp1"
    )
    assert missing.status_code == 400 and missing.json()["errors"]["evidence"]
