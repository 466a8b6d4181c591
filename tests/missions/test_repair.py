"""``manage.py repair`` rebuilds the mission projections from the mission journals: rows lost,
rows behind their journal (a crash between the Git write and the database write), rows edited
by hand; a second run changes nothing. And replay tells a journal edited by hand."""

from __future__ import annotations

from io import StringIO

import pygit2
import pytest
from django.core.management import call_command
from django.forms.models import model_to_dict

from journal.format import BLOB, commit_at, pretty_json, tree_bytes
from ledger.models import AuditEntry
from missions.decide import decide_request, move_of, replay_mission
from missions.journal import (
    MISSION,
    QUESTS,
    REF_PREFIX,
    REQUEST,
    mission_journal,
    mission_to_dict,
)
from missions.models import Mission, MissionRole, WorkPackage
from tests.missions.conftest import move

pytestmark = pytest.mark.django_db


def rows() -> dict:
    missions = {
        m.mission_id: {k: v for k, v in model_to_dict(m).items() if k != "id"}
        for m in Mission.objects.all()
    }
    wps = {
        (wp.mission.mission_id, wp.wp_id): {
            k: v for k, v in model_to_dict(wp).items() if k not in {"id", "mission"}
        }
        for wp in WorkPackage.objects.select_related("mission")
    }
    return {"missions": missions, "wps": wps}


def repair() -> list[str]:
    out = StringIO()
    call_command("repair", "--list", stdout=out)
    return out.getvalue().splitlines()


def test_lost_projections_are_rebuilt_as_they_were_and_roles_are_left_alone(
    client, people, planned
):
    move(client, planned, "wp1", "in_progress", evidence="go")
    before, roles = rows(), MissionRole.objects.count()
    Mission.objects.all().delete()
    lines = repair()
    assert "shop: missions: 1 checked; 1 projections created, 0 updated" in lines
    assert f"  mission created: {planned}" in lines
    assert rows() == before
    assert MissionRole.objects.count() == roles
    assert AuditEntry.objects.filter(action="mission.repaired").count() == 1
    assert "shop: missions: 1 checked; 0 projections created, 0 updated" in repair()
    assert AuditEntry.objects.filter(action="mission.repaired").count() == 1


def test_a_decision_journaled_but_never_projected_is_caught_up(client, people, workspace, planned):
    journal = mission_journal(workspace)
    snapshot = journal.load(planned)
    request = {
        "kind": "wp", "request_id": "crashed", "actor": "ada", "account": people["ada"].pk,
        "at": snapshot.mission.updated_at.isoformat(), "subject": "wp2", "to": "in_progress",
        "role": "lead", "evidence": {"start_approved": {"kind": "text", "text": "go"}},
    }  # fmt: skip
    decision = decide_request(snapshot.mission, request)
    assert decision.accepted
    journal.append(  # the Git write; the process dies before the database write
        planned,
        snapshot.commit,
        mission=decision.mission,
        links=snapshot.links,
        request=request,
        move=move_of(snapshot.mission, decision.mission, request),
        revision=snapshot.revision + 1,
    )
    assert WorkPackage.objects.get(wp_id="wp2").state == "ready"
    assert f"  mission updated: {planned}" in repair()
    mission = Mission.objects.get(mission_id=planned)
    assert mission.journal_head == str(journal.head(planned))
    assert mission.revision == snapshot.revision + 1
    assert WorkPackage.objects.get(wp_id="wp2").state == "in_progress"


def test_rows_edited_by_hand_are_put_back(people, planned):
    before = rows()
    Mission.objects.update(state="completed", attempts=9)
    WorkPackage.objects.filter(wp_id="wp1").update(state="done", quest_id="")
    WorkPackage.objects.filter(wp_id="wp3").delete()
    assert f"  mission updated: {planned}" in repair()
    assert rows() == before


def test_replay_names_the_commit_whose_mission_the_machine_would_not_give(workspace, planned):
    journal = mission_journal(workspace)
    repo, head = journal.repo, journal.head(planned)
    snapshot = journal.at(head)
    forged = {**mission_to_dict(snapshot.mission), "state": "completed"}  # a hand edit
    request = {**snapshot.request, "kind": "link", "request_id": "f", "subject": "wp1",
               "quest": "q1"}  # fmt: skip
    entries = {
        MISSION: (BLOB, repo.create_blob(pretty_json(forged))),
        QUESTS: (BLOB, repo.create_blob(pretty_json(snapshot.links))),
        REQUEST: (BLOB, repo.create_blob(pretty_json(request))),
    }
    tree = repo.odb.write(pygit2.GIT_OBJECT_TREE, tree_bytes(entries))
    message = f"{planned}: forged\n\nEphyra-Revision: {snapshot.revision + 1}\n"
    commit = repo.odb.write(pygit2.GIT_OBJECT_COMMIT, commit_at(tree, head, 0, 0, message))
    repo.references[REF_PREFIX + planned].set_target(commit)
    assert replay_mission(journal, planned) == (
        f"{commit}: mission.json differs from the machine's decision"
    )
