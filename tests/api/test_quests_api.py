"""Quests through the API: the list and its cursor, the filters, one quest, the actions with
their refusals as problems, and the Idempotency-Key."""

from __future__ import annotations

import pytest

from api.models import IdempotentAnswer
from ledger.models import InboundEvent
from quests.models import Quest
from quests.roles import Role
from tests.api.conftest import call, token_for
from tests.quests.conftest import drive, person, work

pytestmark = pytest.mark.django_db


@pytest.fixture
def rita(workspace):
    return person("rita", shop=[Role.REVIEWER])


@pytest.fixture
def token(rita):
    return token_for(rita)


def test_walking_the_cursor_reads_every_quest_once_latest_first(client, workspace, token):
    for n in range(7):
        drive(workspace, f"q{n}", "hypothesised")
    seen, cursor, pages = [], None, 0
    while True:
        url = "workspaces/shop/quests?limit=3" + (f"&cursor={cursor}" if cursor else "")
        body = call(client, "GET", url, token).json()
        assert body["count"] == 7 and body["count_capped"] is False
        seen += [q["id"] for q in body["results"]]
        pages += 1
        cursor = body["next"]
        if cursor is None:
            break
    assert pages == 3
    expected = list(Quest.objects.order_by("-updated_at", "-pk").values_list("quest_id", flat=True))
    assert seen == expected and len(set(seen)) == 7


def test_the_filters_of_the_inbox_narrow_the_list(client, workspace, token):
    drive(workspace, "at-a", "hypothesised")
    drive(workspace, "at-b", "planned")
    answer = call(client, "GET", "workspaces/shop/quests?checkpoint=B", token).json()
    assert [q["id"] for q in answer["results"]] == ["at-b"]
    assert answer["results"][0]["checkpoint"] == "B"
    answer = call(client, "GET", "workspaces/shop/quests?state=hypothesised", token).json()
    assert [q["id"] for q in answer["results"]] == ["at-a"]
    assert call(client, "GET", "workspaces/shop/quests?mine=1", token).json()["results"] == []
    unclaimed = call(client, "GET", "workspaces/shop/quests?unclaimed=1", token).json()
    assert {q["id"] for q in unclaimed["results"]} == {"at-a", "at-b"}
    across = call(client, "GET", "quests", token).json()
    assert {q["workspace"] for q in across["results"]} == {"shop"}


def test_a_bad_filter_or_cursor_is_a_400_problem_naming_the_field(client, workspace, token):
    answer = call(client, "GET", "workspaces/shop/quests?state=flying&limit=0", token)
    assert answer.status_code == 400
    assert answer["Content-Type"] == "application/problem+json"
    body = answer.json()
    assert body["type"].endswith("/api/problems/invalid-input")
    assert set(body["errors"]) == {"state", "limit"}
    answer = call(client, "GET", "workspaces/shop/quests?cursor=%%%", token)
    assert answer.status_code == 400 and "cursor" in answer.json()["errors"]


def test_a_quest_reads_with_its_timeline_evidence_and_effects(client, workspace, token):
    drive(workspace, "q1", "hypothesised")
    body = call(client, "GET", "workspaces/shop/quests/q1", token).json()
    assert body["state"] == "hypothesised" and body["checkpoint"] == "A"
    assert body["timeline"][0]["type"] == "hypothesis_written"
    assert body["evidence"]["hypothesis"]
    assert body["proof"] is None
    assert {e["type"] for e in body["effects"]} >= {"request_checkpoint"}
    assert body["head"] == Quest.objects.get(quest_id="q1").journal_head


def test_a_claim_is_queued_then_applied_by_the_worker(client, workspace, token):
    quest = drive(workspace, "q1", "hypothesised")
    answer = call(
        client, "POST", "workspaces/shop/quests/q1/claim", token, {"head": quest.journal_head}
    )
    assert answer.status_code == 202
    assert answer.json()["status"] == "queued"
    work(workspace)
    assert Quest.objects.get(quest_id="q1").claim == "rita"


def test_an_action_on_a_moved_quest_is_a_409_with_the_state_and_head_now(client, workspace, token):
    quest = drive(workspace, "q1", "hypothesised")
    old = quest.journal_head
    call(client, "POST", "workspaces/shop/quests/q1/claim", token, {"head": old})
    work(workspace)
    now = Quest.objects.get(quest_id="q1")
    before = InboundEvent.objects.count()
    answer = call(client, "POST", "workspaces/shop/quests/q1/pause", token, {"head": old})
    assert answer.status_code == 409
    body = answer.json()
    assert body["type"].endswith("/api/problems/stale-head")
    assert body["state"] == "handed_off" and body["head"] == now.journal_head
    assert InboundEvent.objects.count() == before


def test_a_refusal_by_the_machine_is_a_422_with_its_reason(client, workspace, token):
    quest = drive(workspace, "q1", "hypothesised")
    answer = call(
        client,
        "POST",
        "workspaces/shop/quests/q1/decide",
        token,
        {"head": quest.journal_head, "checkpoint": "C", "decision": "approve"},
    )
    assert answer.status_code == 422
    body = answer.json()
    assert body["type"].endswith("/api/problems/refused")
    assert body["reason"] and body["reason"] == body["detail"]
    assert not InboundEvent.objects.filter(type="checkpoint_decided").exists()


def test_a_write_that_is_not_json_is_a_415_problem(client, workspace, token):
    drive(workspace, "q1", "hypothesised")
    answer = client.post(
        "/api/v1/workspaces/shop/quests/q1/claim",
        data="head=x",
        content_type="application/x-www-form-urlencoded",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert answer.status_code == 415
    assert answer.json()["type"].endswith("/api/problems/unsupported-media-type")


def test_a_body_that_is_not_an_object_or_lacks_the_head_is_a_400(client, workspace, token):
    drive(workspace, "q1", "hypothesised")
    answer = call(client, "POST", "workspaces/shop/quests/q1/claim", token, ["head"])
    assert answer.status_code == 400
    answer = call(client, "POST", "workspaces/shop/quests/q1/claim", token, {})
    assert answer.status_code == 400 and answer.json()["errors"]["head"]
    broken = client.post(
        "/api/v1/workspaces/shop/quests/q1/claim",
        data="{not json",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert broken.status_code == 400 and "body" in broken.json()["errors"]
    assert InboundEvent.objects.filter(type="claimed").count() == 0


def test_the_same_idempotency_key_and_request_answers_the_first_answer_again(
    client, workspace, token
):
    quest = drive(workspace, "q1", "hypothesised")
    body = {"head": quest.journal_head}
    first = call(
        client, "POST", "workspaces/shop/quests/q1/claim", token, body, idempotency_key="claim-1"
    )
    work(workspace)  # the quest moved: a new request with this head would be stale
    again = call(
        client, "POST", "workspaces/shop/quests/q1/claim", token, body, idempotency_key="claim-1"
    )
    assert again.status_code == first.status_code == 202
    assert again.json() == first.json()
    assert again["Idempotent-Replay"] == "true"
    assert InboundEvent.objects.filter(type="claimed").count() == 1


def test_the_same_idempotency_key_with_another_request_is_a_422(client, workspace, token):
    quest = drive(workspace, "q1", "hypothesised")
    call(
        client,
        "POST",
        "workspaces/shop/quests/q1/comment",
        token,
        {"body": "one"},
        idempotency_key="k",
    )
    answer = call(
        client,
        "POST",
        "workspaces/shop/quests/q1/comment",
        token,
        {"body": "two"},
        idempotency_key="k",
    )
    assert answer.status_code == 422
    assert answer.json()["type"].endswith("/api/problems/idempotency-key-reused")
    assert InboundEvent.objects.filter(type="comment_added").count() == 1
    assert IdempotentAnswer.objects.count() == 1
    assert quest.journal_head == Quest.objects.get(quest_id="q1").journal_head


def test_an_admin_queues_an_integration_event_and_a_person_only_one_is_refused(client, workspace):
    drive(workspace, "q1", "hypothesised")
    token = token_for(person("ada", shop=[Role.ADMIN]), role="admin")
    event = {"id": "ci-1", "at": "2026-01-06T00:00:00Z", "type": "watch_clean", "actor": "ci"}
    answer = call(client, "POST", "workspaces/shop/quests/q1/events", token, event)
    assert answer.status_code == 202 and answer.json() == {"status": "queued", "event": "ci-1"}
    assert InboundEvent.objects.get(event_id="ci-1").source == "api:ada"
    claimed = {**event, "id": "ci-2", "type": "claimed"}
    answer = call(client, "POST", "workspaces/shop/quests/q1/events", token, claimed)
    assert answer.status_code == 422 and "action" in answer.json()["reason"]
    wrong = {**event, "id": "ci-3", "type": "watch_clean", "colour": "red"}
    answer = call(client, "POST", "workspaces/shop/quests/q1/events", token, wrong)
    assert answer.status_code == 400 and answer.json()["errors"]["event"]
    assert not InboundEvent.objects.filter(event_id__in=["ci-2", "ci-3"]).exists()


def test_a_post_to_an_unknown_api_path_is_a_404_problem_not_a_csrf_page(client, workspace):
    answer = client.post("/api/v1/nothing/here", data="{}", content_type="application/json")
    assert answer.status_code == 404
    assert answer["Content-Type"] == "application/problem+json"
    assert answer.json()["detail"] == "there is nothing at /api/v1/nothing/here"
    meaning = client.get("/api/problems/stale-head").json()
    assert meaning["status"] == 409 and "head" in meaning["description"]
