"""The seed's scenarios, end to end through the mission pages: each move made with the form the
page offers the person, as they would click it; each refusal sent as a crafted request."""

from __future__ import annotations

import json

import pytest

from ledger.models import AuditEntry
from missions.decide import replay_mission
from missions.journal import mission_journal
from missions.models import Mission, WorkPackage
from quests.workspaces import workspace_journal
from tests.missions.conftest import (
    abandon,
    forms_of,
    message_after,
    move,
    offered,
    page_url,
    send,
)

pytestmark = pytest.mark.django_db


def as_(client, people, name):
    client.force_login(people[name])
    return client


def proof_digest(workspace, quest_id: str) -> str:
    raw = workspace_journal(workspace).read(quest_id, "proof/bundle.json")
    return json.loads(raw)["digest"]


def test_a_mission_of_three_quest_carried_work_packages_goes_to_completed(
    client, people, workspace, planned
):
    m = planned
    for n in (1, 2, 3):
        wp = f"wp{n}"
        move(as_(client, people, "ada"), m, wp, "in_progress", evidence=f"delegated to q{n}")
        form = offered(as_(client, people, "mia"), m, wp, "checking")
        assert form.radios["evidence_kind"] == ["text", "link", "file", "proof", "quest"]
        answer = send(client, form, evidence_kind="proof")
        assert answer["X-Ephyra-Outcome"] == "applied"
        move(as_(client, people, "cora"), m, wp, "done", evidence="tests green, read the diff")
    move(as_(client, people, "ada"), m, m, "review", evidence="all three done")
    move(as_(client, people, "cora"), m, m, "completed", evidence="review passed")

    mission = Mission.objects.get(mission_id=m)
    assert mission.state == "completed"
    assert (
        list(WorkPackage.objects.filter(mission=mission).values_list("state", flat=True))
        == ["done"] * 3
    )
    # Each work package's result is its quest's proof, by the digest the quest's journal holds.
    history = mission_journal(workspace).history(m)
    cited = {
        s.request["subject"]: s.request["evidence"]["result_produced"]
        for s in history
        if s.request.get("to") == "checking"
    }
    for n in (1, 2, 3):
        assert cited[f"wp{n}"]["kind"] == "proof"
        assert cited[f"wp{n}"]["digest"] == proof_digest(workspace, f"q{n}")
    # The journal is the machine's: every request decided again gives every commit.
    assert replay_mission(mission_journal(workspace), m) is None
    page = as_(client, people, "ada").get(page_url(m)).content.decode()
    assert "Nothing for you to do on the mission now." in page
    listing = client.get("/missions/").content.decode()
    assert "done 3" in listing and "3 in all" in listing
    actions = list(
        AuditEntry.objects.filter(object=f"mission:{m}").values_list("action", flat=True)
    )
    assert actions.count("mission.wp_moved") == 12 and actions.count("mission.moved") == 5


def test_a_failed_check_sends_the_work_package_back_and_grows_the_attempt_ledger(
    client, people, workspace, planned
):
    m = planned
    move(as_(client, people, "ada"), m, "wp1", "in_progress", evidence="go")
    for round_ in (1, 2):
        move(as_(client, people, "mia"), m, "wp1", "checking", evidence=f"result {round_}")
        move(as_(client, people, "ada"), m, "wp1", "in_progress", evidence=f"fails case {round_}",
             note=f"repair cycle {round_}")  # fmt: skip
    move(as_(client, people, "dan"), m, "wp1", "checking", evidence="repaired")
    move(as_(client, people, "cora"), m, "wp1", "done", evidence="passes now")

    mission = Mission.objects.get(mission_id=m)
    assert mission.attempts == 2
    ledger = mission.data["ledger"]
    assert [(e["sequence"], e["subject"], e["from"], e["to"]) for e in ledger] == [
        (1, "wp1", "checking", "in_progress"),
        (2, "wp1", "checking", "in_progress"),
    ]
    assert [e["reason"] for e in ledger] == ["repair cycle 1", "repair cycle 2"]
    wp = WorkPackage.objects.get(mission=mission, wp_id="wp1")
    assert wp.makers == ["mia", "dan"] and wp.checker == "cora"
    page = client.get(page_url(m)).content.decode()
    assert "repair cycle 2" in page and "check_failed" in page


def test_a_maker_is_not_offered_to_check_their_own_work_and_is_refused_when_they_try(
    client, people, workspace, planned
):
    m = planned
    as_(client, people, "ada").post(
        f"/missions/shop/{m}/roles", {"username": "mia", "role": "checker", "change": "grant"}
    )
    move(client, m, "wp1", "in_progress", evidence="go")
    move(as_(client, people, "mia"), m, "wp1", "checking", evidence="my result")
    assert offered(client, m, "wp1", "done") is None  # she is a checker, but made it
    head = Mission.objects.get(mission_id=m).journal_head

    crafted = offered(as_(client, people, "cora"), m, "wp1", "done")  # a real form, sent by mia
    answer = send(as_(client, people, "mia"), crafted, role="checker", evidence_kind="text",
                  evidence_text="looks fine to me")  # fmt: skip
    assert (answer.status_code, answer["X-Ephyra-Outcome"]) == (303, "refused")
    assert message_after(client, answer) == (
        "Not done: checker independence: 'mia' produced work package 'wp1' and may not pass "
        "its check"
    )
    mission = Mission.objects.get(mission_id=m)
    assert mission.journal_head == head
    assert WorkPackage.objects.get(mission=mission, wp_id="wp1").state == "checking"


def test_a_lead_is_not_offered_to_cancel_and_is_refused_with_the_machines_reason(
    client, people, workspace, planned
):
    m = planned
    assert offered(as_(client, people, "ada"), m, m, "cancelled") is None
    review = offered(client, m, m, "paused")  # a form the lead has, turned into a cancel
    answer = send(client, review, to="cancelled", evidence_kind="text", evidence_text="stop it")
    assert (answer.status_code, answer["X-Ephyra-Outcome"]) == (303, "refused")
    assert message_after(client, answer) == "Not done: forbidden: only a human may cancel a mission"
    # Claiming a role one does not hold is not a refusal of the machine: it is forbidden.
    answer = send(client, review, to="cancelled", role="human", evidence_kind="text",
                  evidence_text="stop it")  # fmt: skip
    assert answer.status_code == 403
    assert Mission.objects.get(mission_id=m).state == "running"

    move(as_(client, people, "hugo"), m, m, "cancelled", evidence="order #12")
    assert Mission.objects.get(mission_id=m).state == "cancelled"
    assert not [
        f for f in forms_of(client.get(page_url(m)).content.decode()) if "/move" in f.action
    ]


def test_an_abandoned_quest_is_evidence_and_a_failed_wp_is_superseded_by_a_linked_new_one(
    client, people, workspace, planned
):
    m = planned
    move(as_(client, people, "ada"), m, "wp2", "in_progress", evidence="go")
    abandon(workspace, "q2")
    page = client.get(page_url(m)).content.decode()
    assert "The quest is abandoned: evidence for a failure." in page
    assert WorkPackage.objects.get(wp_id="wp2").state == "in_progress"  # nothing moved by itself

    form = offered(client, m, "wp2", "failed")
    answer = send(client, form, evidence_kind="quest")
    assert answer["X-Ephyra-Outcome"] == "applied"
    evidence = mission_journal(workspace).load(m).request["evidence"]["beyond_repair"]
    assert evidence["text"].startswith("quest q2 is abandoned at revision")
    assert offered(client, m, "wp2", "in_progress") is None  # FAILED is final

    form = offered(client, m, "wp2", kind="supersede")
    answer = send(client, form, title="Fix, second try", evidence_kind="text",
                  evidence_text="q2 chased the wrong frame")  # fmt: skip
    assert answer["X-Ephyra-Outcome"] == "applied"
    new = WorkPackage.objects.get(wp_id="wp4")
    assert (new.state, new.supersedes, new.title) == ("todo", "wp2", "Fix, second try")
    page = client.get(page_url(m)).content.decode()
    assert 'superseded by <a href="#wp-wp4">wp4</a>' in page
    assert 'supersedes <a href="#wp-wp2">wp2</a>' in page
    assert offered(client, m, "wp2", kind="supersede") is None  # superseded once
    ledger = Mission.objects.get(mission_id=m).data["ledger"]
    assert ledger[-1]["reason"] == "superseded by work package 'wp4'"


def test_a_failed_mission_is_never_revived_and_a_new_linked_one_takes_over_its_people(
    client, people, workspace, planned
):
    m = planned
    move(as_(client, people, "ada"), m, m, "failed", evidence="the vendor API is gone")
    assert not [
        f for f in forms_of(client.get(page_url(m)).content.decode()) if "/move" in f.action
    ]
    form = offered(client, m, m, kind="supersede")
    answer = send(client, form, title="Checkout revamp, take two", evidence_kind="link",
                  evidence_link="https://wiki.example.com/postmortem-7")  # fmt: skip
    assert (answer.status_code, answer["X-Ephyra-Outcome"]) == (303, "applied")
    assert answer["Location"] == "/missions/shop/m2/"

    new = Mission.objects.get(mission_id="m2")
    assert (new.state, new.supersedes, new.title) == ("created", m, "Checkout revamp, take two")
    assert new.data["ledger"][0]["reason"] == "superseded by mission 'm2'"
    assert Mission.objects.get(mission_id=m).state == "failed"  # untouched
    old_page = client.get(page_url(m)).content.decode()
    assert 'superseded by <a href="/missions/shop/m2/">m2</a>' in old_page
    assert offered(client, m, m, kind="supersede") is None  # superseded once
    new_page = as_(client, people, "mia").get(page_url("m2")).content.decode()
    assert 'supersedes <a href="/missions/shop/m1/">m1</a>' in new_page
    assert "<dt>Your roles</dt><dd>maker</dd>" in new_page.replace("\n", "")
    assert replay_mission(mission_journal(workspace), "m2") is None
