"""The write path's promises: one decision per form however often it is sent, a page that is
stale for what it acts on is refused, a lost race never overwrites, a WP's quest is one open
quest of the workspace (opened for it if need be), and roles are the accounts'."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from ephyra.core.mission import WPState
from ledger.models import InboundEvent
from missions import services
from missions.decide import decide_request, move_of
from missions.evidence import Evidence
from missions.journal import MissionConflict, mission_journal
from missions.models import Mission, MissionRole, WorkPackage
from missions.roles import mission_role_grant, mission_role_revoke
from quests.actions import Invalid, Refused, Stale
from quests.models import Quest
from quests.roles import Role, role_revoke
from tests.missions.conftest import (
    link,
    message_after,
    move,
    offered,
    page_url,
    send,
)
from tests.quests.conftest import drive, person, work

pytestmark = pytest.mark.django_db
TEXT = Evidence("text", text="noted")


def test_the_same_form_sent_twice_is_one_decision(client, people, planned):
    form = offered(client, planned, "wp1", "in_progress")
    first = send(client, form, evidence_kind="text", evidence_text="go")
    again = send(client, form, evidence_kind="text", evidence_text="go")
    assert (first["X-Ephyra-Outcome"], again["X-Ephyra-Outcome"]) == ("applied", "duplicate")
    assert message_after(client, again) == "Already done: this form was sent before."
    mission = Mission.objects.get(mission_id=planned)
    assert len(mission_journal(mission.workspace).history(planned)) == mission.revision


def test_the_same_key_for_another_request_is_refused(client, people, planned):
    mission = Mission.objects.get(mission_id=planned)
    ada = people["ada"]
    services.wp_transition(ada, mission, "wp1", to="in_progress", role="lead", evidence=TEXT,
                           key="k1")  # fmt: skip
    with pytest.raises(Invalid, match="this idempotency key was used for a different request"):
        services.wp_transition(ada, mission, "wp2", to="in_progress", role="lead",
                               evidence=TEXT, key="k1")  # fmt: skip


def test_a_page_is_stale_only_for_what_moved_since_it_was_shown(client, people, planned):
    m = planned
    move(client, m, "wp1", "in_progress", evidence="go")
    client.force_login(people["mia"])
    mine = offered(client, m, "wp1", "checking")
    client.force_login(people["dan"])
    dans = offered(client, m, "wp1", "checking")  # the same page, shown to the debugger
    client.force_login(people["ada"])
    move(client, m, "wp2", "in_progress", evidence="another package moved meanwhile")

    client.force_login(people["mia"])
    answer = send(client, mine, evidence_kind="text", evidence_text="done")
    assert answer["X-Ephyra-Outcome"] == "applied"  # wp2 moving does not make wp1's form stale
    client.force_login(people["dan"])
    answer = send(client, dans, evidence_kind="text", evidence_text="done too")
    assert answer["X-Ephyra-Outcome"] == "stale"
    assert message_after(client, answer).startswith(
        f"Not done: {m} moved on since you saw it (wp1 is CHECKING, revision"
    )
    assert WorkPackage.objects.get(wp_id="wp1").makers == ["mia"]


def test_a_second_writer_on_the_same_head_loses_and_the_first_stays(workspace, people, planned):
    journal = mission_journal(workspace)
    snapshot = journal.load(planned)
    request = {
        "kind": "mission", "request_id": "race", "actor": "ada", "account": 1,
        "at": snapshot.mission.updated_at.isoformat(), "subject": planned, "to": "paused",
        "role": "lead", "evidence": {"no_progress": {"kind": "text", "text": "stuck"}},
    }  # fmt: skip
    decision = decide_request(snapshot.mission, request)
    move_ = move_of(snapshot.mission, decision.mission, request)
    args = {"mission": decision.mission, "links": snapshot.links, "request": request,
            "move": move_, "revision": snapshot.revision + 1}  # fmt: skip
    first = journal.append(planned, snapshot.commit, **args)
    with pytest.raises(MissionConflict, match="the ref moved"):
        journal.append(planned, snapshot.commit, **args)
    assert journal.head(planned) == first


def test_a_mission_created_twice_with_one_key_is_one_mission_even_before_it_is_projected(
    workspace, people
):
    ada = people["ada"]
    first = services.mission_create(ada, workspace, title="One", key="same")
    Mission.objects.all().delete()  # as if the database write had been lost
    again = services.mission_create(ada, workspace, title="One", key="same")
    assert (again.duplicate, again.mission.mission_id) == (True, first.mission.mission_id)
    assert (
        services.mission_create(ada, workspace, title="Two", key="other").mission.mission_id == "m2"
    )
    assert sorted(mission_journal(workspace).heads()) == ["m1", "m2"]


def test_a_work_package_without_a_quest_gets_a_new_one_from_the_worker(
    client, people, workspace, planned
):
    link(client, planned, "wp1", quest="")  # replaces q1, which was not started yet
    row = InboundEvent.objects.get(quest_id=f"{planned}-wp1")
    assert (row.type, row.source, row.payload["actor"]) == ("signal_sensed", "person:ada", "ada")
    page = client.get(page_url(planned)).content.decode()
    assert "queued for the worker" in page
    work(workspace)
    assert Quest.objects.get(quest_id=f"{planned}-wp1").title == "Reproduce"
    page = client.get(page_url(planned)).content.decode()
    assert f'href="/q/shop/{planned}-wp1/"' in page


def test_a_quest_carries_one_open_work_package_and_a_final_one_keeps_its_quest(
    people, workspace, planned
):
    mission = Mission.objects.get(mission_id=planned)
    ada = people["ada"]
    with pytest.raises(Refused, match=f"quest q1 already carries wp1 of {planned}"):
        services.wp_link_quest(ada, mission, "wp2", quest_id="q1", key="l1")
    with pytest.raises(Invalid, match="there is no quest 'nope' in shop"):
        services.wp_link_quest(ada, mission, "wp2", quest_id="nope", key="l2")
    for to, key in (("in_progress", "a"), ("failed", "b")):
        services.wp_transition(ada, mission, "wp3", to=to, role="lead", evidence=TEXT, key=key)
    drive(workspace, "q7", "hypothesised")
    with pytest.raises(Refused, match="wp3 is FAILED: the quest that carried it stays linked"):
        services.wp_link_quest(ada, mission, "wp3", quest_id="q7", key="l3")
    assert WorkPackage.objects.get(wp_id="wp3").quest_id == "q3"


def test_mission_roles_go_to_deciders_and_are_used_only_while_they_may_decide(
    people, workspace, planned
):
    ada, mia = people["ada"], people["mia"]
    mission = Mission.objects.get(mission_id=planned)
    sam = person("sam", shop=[Role.STAFF])
    with pytest.raises(Invalid, match="sam is not a reviewer or admin of shop"):
        mission_role_grant(ada, workspace, planned, "sam", "checker")
    with pytest.raises(PermissionDenied):
        mission_role_grant(mia, workspace, planned, "sam", "checker")
    with pytest.raises(Invalid, match="a mission role is one of"):
        mission_role_grant(ada, workspace, planned, "mia", "circuit")
    assert mission_role_grant(ada, workspace, planned, "mia", "maker") is False  # held already

    services.wp_transition(ada, mission, "wp1", to="in_progress", role="lead", evidence=TEXT,
                           key="s")  # fmt: skip
    role_revoke(mia, workspace, Role.REVIEWER)  # no longer decides in shop: the role is idle
    with pytest.raises(PermissionDenied, match="you do not hold the role maker"):
        services.wp_transition(mia, mission, "wp1", to="checking", role="maker", evidence=TEXT,
                               key="c")  # fmt: skip
    assert mission_role_revoke(ada, workspace, planned, "mia", "maker") is True
    assert not MissionRole.objects.filter(user=mia).exists()
    assert sam.is_active


def test_a_refused_move_changes_nothing_and_says_the_machines_reason(people, planned):
    mission = Mission.objects.get(mission_id=planned)
    head = mission.journal_head
    with pytest.raises(Refused) as refused:
        services.wp_transition(people["ada"], mission, "wp1", to="done", role="lead",
                               evidence=TEXT, key="x")  # fmt: skip
    assert str(refused.value) == (
        "forbidden: a work package reaches DONE only from CHECKING, after a passed check"
    )
    with pytest.raises(Stale):
        services.wp_transition(people["ada"], mission, "wp1", to="in_progress", role="lead",
                               evidence=TEXT, seen_head="0" * 40, key="y")  # fmt: skip
    mission.refresh_from_db()
    assert mission.journal_head == head
    assert WorkPackage.objects.get(wp_id="wp1").state == WPState.READY
