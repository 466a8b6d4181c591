"""Deliveries the forges send, replayed from fixtures through Django's test client: what each
answers, what it stores, and that the quest events it submits are ones the engine takes."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from ephyra.core.events import parse_event
from intake.models import ReviewLink, WebhookDelivery
from ledger.models import InboundEvent
from quests.engine import quest_apply
from quests.models import Quest
from tests.intake.conftest import (
    BASE_NEW,
    BASE_OLD,
    LANDED,
    PATCH,
    counts,
    deliver,
    fixture,
    fixture_bytes,
)

pytestmark = pytest.mark.django_db

GUID = "72d3162e-cc78-11e3-81ab-4c9367dc0958"


@pytest.fixture(autouse=True)
def _hooks(hooks):
    return hooks


def inbound(workspace):
    return list(InboundEvent.objects.filter(workspace=workspace).order_by("event_id"))


def apply_inbound(workspace):
    """What the workspace's worker does with the queue: each event through the engine."""
    return [
        quest_apply(workspace, parse_event(row.payload)).applied.decision
        for row in inbound(workspace)
    ]


def state_of(workspace, quest_id):
    return Quest.objects.get(workspace=workspace, quest_id=quest_id).state


def test_a_github_ping_is_answered_and_recorded(client, workspace):
    response = deliver(client, "github", "ping", fixture_bytes("github", "ping"), delivery=GUID)
    assert (response.status_code, response.json()) == (200, {"status": "pong"})
    row = WebhookDelivery.objects.get()
    assert (row.forge, row.delivery_id, row.event, row.outcome) == (
        "github",
        GUID,
        "ping",
        "ignored",
    )
    assert inbound(workspace) == []


@pytest.mark.parametrize(
    ("kind", "event", "forge_fixture", "prefix"),
    [
        ("github", "push", "github", "gh"),
        ("gitlab", "Push Hook", "gitlab", "gl"),
        ("gitea", "push", "gitea", "gt"),
        ("forgejo", "push", "gitea", "fj"),
    ],
)
def test_a_push_to_the_base_moves_it_under_every_quest_whose_proof_it_voids(
    client, workspace, quests, kind, event, forge_fixture, prefix
):
    quests.ready("checkout-500")
    quests.landing("cart-total")
    quests.researching("login-loop")
    quests.watching("old-fix")

    response = deliver(client, kind, event, fixture_bytes(forge_fixture, "push"), delivery=GUID)

    assert (response.status_code, response.json()) == (202, {"status": "accepted", "events": 2})
    rows = inbound(workspace)
    assert [(r.event_id, r.quest_id, r.type) for r in rows] == [
        (f"{prefix}-{GUID}-0", "cart-total", "base_moved"),
        (f"{prefix}-{GUID}-1", "checkout-500", "base_moved"),
    ]
    assert {r.payload["base"] for r in rows} == {BASE_NEW}
    assert {r.source for r in rows} == {f"webhook:{kind}"}
    delivery = WebhookDelivery.objects.get()
    assert (delivery.outcome, delivery.events) == ("processed", 2)
    assert delivery.quests == ["cart-total", "checkout-500"]
    assert delivery.details == {"ref": "refs/heads/main", "before": BASE_OLD, "after": BASE_NEW}

    decisions = apply_inbound(workspace)
    assert all(d.accepted for d in decisions)
    assert state_of(workspace, "checkout-500") == "proving"  # proof runs again on the new base
    assert state_of(workspace, "cart-total") == "patching"  # rebase before landing
    assert state_of(workspace, "login-loop") == "researching"


def test_a_push_to_the_base_with_no_quest_to_move_is_processed_with_no_event(client, workspace):
    response = deliver(client, "github", "push", fixture_bytes("github", "push"))
    assert (response.status_code, response.json()) == (200, {"status": "processed", "events": 0})
    assert WebhookDelivery.objects.get().outcome == "processed"


def test_a_push_to_another_branch_is_ignored(client, workspace, quests):
    quests.ready("checkout-500")
    payload = fixture("github", "push") | {"ref": "refs/heads/feature"}
    response = deliver(client, "github", "push", payload)
    reason = "a push to refs/heads/feature, not to the base branch main"
    assert (response.status_code, response.json()) == (
        200,
        {"status": "ignored", "reason": reason},
    )
    assert WebhookDelivery.objects.get().details == {"reason": reason}
    assert inbound(workspace) == []


def test_github_may_send_the_payload_as_a_form(client, workspace, quests):
    quests.ready("checkout-500")
    body = urlencode({"payload": fixture_bytes("github", "push").decode()}).encode()
    response = deliver(
        client, "github", "push", body, content_type="application/x-www-form-urlencoded"
    )
    assert (response.status_code, response.json()) == (202, {"status": "accepted", "events": 1})


def test_a_github_comment_on_a_quests_pull_request_is_a_comment_on_the_quest(
    client, workspace, quests
):
    quests.ready("checkout-500")
    response = deliver(client, "github", "issue_comment", fixture_bytes("github", "issue_comment"))
    assert (response.status_code, response.json()) == (202, {"status": "accepted", "events": 1})
    (row,) = inbound(workspace)
    assert row.payload == {
        "type": "comment_added",
        "id": "gh-d-1-0",
        "quest": "checkout-500",
        "at": "2026-12-02T11:20:13Z",
        "actor": "github:mona",
        "body": "Does this also cover carts restored from a saved session?",
        "reply_requested": False,
    }
    (decision,) = apply_inbound(workspace)
    assert decision.accepted and decision.quest.comments == 1


def test_a_pull_request_from_an_ephyra_branch_links_later_comments_to_its_quest(
    client, workspace, quests
):
    quests.ready("checkout-500")
    response = deliver(client, "github", "pull_request", fixture_bytes("github", "pull_request"))
    assert (response.status_code, response.json()) == (200, {"status": "recorded"})
    link = ReviewLink.objects.get()
    assert (link.repository, link.number, link.quest_id) == ("acme/shop", 43, "checkout-500")

    # A comment on that pull request whose body carries no marker still reaches the quest.
    comment = fixture("github", "issue_comment")
    comment["issue"] |= {"number": 43, "body": "A hand-written fix."}
    response = deliver(client, "github", "issue_comment", comment, delivery="d-2")
    assert (response.status_code, response.json()) == (202, {"status": "accepted", "events": 1})
    assert [r.quest_id for r in inbound(workspace)] == ["checkout-500"]


def test_a_pull_request_that_names_no_quest_is_ignored(client, workspace):
    payload = fixture("github", "pull_request")
    payload["pull_request"]["head"]["ref"] = "feature/rounding"
    response = deliver(client, "github", "pull_request", payload)
    assert response.json() == {
        "status": "ignored",
        "reason": "the pull request names no quest of this workspace",
    }
    assert ReviewLink.objects.count() == 0


def test_a_comment_on_an_unknown_or_finished_quest_submits_nothing(client, workspace, quests):
    quests.closed("checkout-500")
    response = deliver(client, "github", "issue_comment", fixture_bytes("github", "issue_comment"))
    assert (response.status_code, response.json()) == (200, {"status": "processed", "events": 0})
    assert inbound(workspace) == []


def test_a_gitlab_merge_request_note_is_a_comment_on_the_quest(client, workspace, quests):
    quests.ready("checkout-500")
    response = deliver(
        client, "gitlab", "Note Hook", fixture_bytes("gitlab", "note"), delivery=GUID
    )
    assert response.status_code == 202
    (row,) = inbound(workspace)
    assert (row.event_id, row.quest_id, row.payload["actor"]) == (
        f"gl-{GUID}-0",
        "checkout-500",
        "gitlab:ann",
    )


def test_gitlab_retries_are_recognised_by_their_event_uuid_when_there_is_no_idempotency_key(
    client, workspace, quests
):
    quests.ready("checkout-500")
    body = fixture_bytes("gitlab", "note")
    headers = {"Idempotency-Key": "", "X-Gitlab-Event-UUID": GUID}
    first = deliver(client, "gitlab", "Note Hook", body, headers=headers)
    again = deliver(client, "gitlab", "Note Hook", body, headers=headers)
    assert (first.status_code, again.json()) == (202, {"status": "duplicate"})
    assert WebhookDelivery.objects.get().delivery_id == GUID


def test_a_gitea_comment_on_a_quests_pull_request_is_a_comment_on_the_quest(
    client, workspace, quests
):
    quests.ready("checkout-500")
    response = deliver(client, "gitea", "issue_comment", fixture_bytes("gitea", "issue_comment"))
    assert response.status_code == 202
    (row,) = inbound(workspace)
    assert (row.quest_id, row.payload["actor"], row.payload["at"]) == (
        "checkout-500",
        "gitea:ann",
        "2026-12-02T10:21:36Z",
    )


def test_forgejo_headers_are_read_at_the_gitea_endpoint(client, workspace, quests):
    quests.ready("checkout-500")
    body = fixture_bytes("gitea", "issue_comment")
    response = client.post(
        "/hooks/gitea/shop",
        data=body,
        content_type="application/json",
        headers={
            "X-Forgejo-Event": "issue_comment",
            "X-Forgejo-Delivery": GUID,
            **{"X-Forgejo-Signature": _gitea_signature(body)},
        },
    )
    assert response.status_code == 202


def _gitea_signature(body: bytes) -> str:
    from tests.intake.conftest import sign

    return sign("gitea", body)["X-Gitea-Signature"]


@pytest.mark.parametrize(
    ("kind", "event", "forge_fixture"),
    [("github", "deployment_status", "github"), ("gitlab", "Deployment Hook", "gitlab")],
)
def test_a_production_deployment_of_a_landed_commit_is_observed_by_its_quest(
    client, workspace, quests, kind, event, forge_fixture
):
    quests.watching("checkout-500", commit=LANDED)
    quests.watching("other", commit="d" * 40)
    response = deliver(
        client,
        kind,
        event,
        fixture_bytes(forge_fixture, "deployment" if kind == "gitlab" else "deployment_status"),
    )
    assert (response.status_code, response.json()) == (202, {"status": "accepted", "events": 1})
    row = WebhookDelivery.objects.get()
    assert (row.outcome, row.events, row.quests) == ("processed", 1, ["checkout-500"])
    assert row.details["sha"] == LANDED and row.details["environment"] == "production"
    (queued,) = inbound(workspace)
    assert (queued.type, queued.payload["commit"], queued.payload["includes"]) == (
        "deployment_observed",
        LANDED,
        LANDED,
    )
    (decision,) = apply_inbound(workspace)
    assert decision.accepted and decision.state.value == "watching"
    data = Quest.objects.get(workspace=workspace, quest_id="checkout-500").data
    assert (data["deployed_commit"], data["deployed_to"]) == (LANDED, "production")


def test_a_staging_deployment_is_recorded_and_watched_by_no_quest(client, workspace, quests):
    quests.watching("checkout-500", commit=LANDED)
    payload = fixture("gitlab", "deployment")
    payload |= {"environment": "production-eu", "environment_tier": "staging"}
    response = deliver(client, "gitlab", "Deployment Hook", payload)
    assert (response.status_code, response.json()) == (200, {"status": "recorded"})
    row = WebhookDelivery.objects.get()
    assert (row.quests, row.details["production"]) == ([], False)
    assert (row.details["deployment"], row.details["reason"]) == (
        "decided",
        "production-eu is not production: recorded, no watch opens",
    )
    assert inbound(workspace) == []


def test_a_second_deployment_of_the_same_commit_is_recorded_not_observed_again(
    client, workspace, quests
):
    quests.watching("checkout-500", commit=LANDED)
    body = fixture_bytes("github", "deployment_status")
    assert deliver(client, "github", "deployment_status", body, delivery="d-1").status_code == 202
    apply_inbound(workspace)
    again = deliver(client, "github", "deployment_status", body, delivery="d-2")
    assert (again.status_code, again.json()) == (200, {"status": "recorded"})
    assert [row.type for row in inbound(workspace)] == ["deployment_observed"]


@pytest.mark.parametrize(
    ("kind", "event", "name", "conclusion", "check", "passed"),
    [
        ("github", "check_run", "check_run", "success", "tests (3.11)", True),
        ("github", "status", "status", "failure", "ci/tests", False),
        ("gitlab", "Pipeline Hook", "pipeline", "failed", "pipeline", False),
        ("gitea", "status", "status", "failure", "ci / tests (push)", False),
        ("forgejo", "status", "status", "failure", "ci / tests (push)", False),
    ],
)
def test_a_check_result_on_a_quests_patch_is_reported_to_it(
    client, workspace, quests, kind, event, name, conclusion, check, passed
):
    quests.ready("checkout-500", head=PATCH)
    forge_fixture = "gitea" if kind == "forgejo" else kind
    response = deliver(client, kind, event, fixture_bytes(forge_fixture, name))
    assert (response.status_code, response.json()) == (202, {"status": "accepted", "events": 1})
    row = WebhookDelivery.objects.get()
    assert row.quests == ["checkout-500"]
    assert (row.details["sha"], row.details["conclusion"]) == (PATCH, conclusion)
    (queued,) = inbound(workspace)
    assert queued.type == "checks_reported"
    assert queued.payload["checks"] == [{"name": check, "passed": passed}]
    (decision,) = apply_inbound(workspace)
    assert decision.accepted
    data = Quest.objects.get(workspace=workspace, quest_id="checkout-500").data
    assert data["failing_checks"] == ([] if passed else [check])


def test_a_check_that_says_neither_pass_nor_fail_is_recorded_only(client, workspace, quests):
    quests.ready("checkout-500", head=PATCH)
    payload = fixture("github", "check_run")
    payload["check_run"]["conclusion"] = "skipped"
    response = deliver(client, "github", "check_run", payload)
    assert (response.status_code, response.json()) == (200, {"status": "recorded"})
    assert WebhookDelivery.objects.get().details["conclusion"] == "skipped"
    assert inbound(workspace) == []


def test_a_check_on_a_landed_quests_old_patch_is_recorded_only(client, workspace, quests):
    quests.watching("checkout-500", commit=LANDED)
    response = deliver(client, "github", "check_run", fixture_bytes("github", "check_run"))
    assert (response.status_code, response.json()) == (200, {"status": "recorded"})
    assert inbound(workspace) == []


@pytest.mark.parametrize(
    ("kind", "event"),
    [("github", "star"), ("gitlab", "Wiki Page Hook"), ("gitea", "release"), ("forgejo", "fork")],
)
def test_an_event_type_ephyra_does_not_act_on_is_acknowledged_so_the_hook_stays_enabled(
    client, workspace, kind, event
):
    response = deliver(client, kind, event, {"anything": True})
    label = {"github": "GitHub", "gitlab": "GitLab", "gitea": "Gitea", "forgejo": "Forgejo"}[kind]
    assert (response.status_code, response.json()) == (
        200,
        {"status": "ignored", "reason": f"{label} event {event!r} is not one Ephyra acts on"},
    )
    assert WebhookDelivery.objects.get().outcome == "ignored"


def test_a_redelivery_is_acknowledged_and_not_processed_twice(client, workspace, quests):
    quests.ready("checkout-500")
    body = fixture_bytes("github", "push")
    first = deliver(client, "github", "push", body, delivery=GUID)
    before = counts()
    again = deliver(client, "github", "push", body, delivery=GUID)
    assert first.status_code == 202
    assert (again.status_code, again.json()) == (200, {"status": "duplicate"})
    assert counts() == before == (1, 1, 0)


def test_the_same_delivery_id_from_another_forge_is_another_delivery(client, workspace, quests):
    quests.ready("checkout-500")
    deliver(client, "github", "push", fixture_bytes("github", "push"), delivery=GUID)
    response = deliver(client, "gitea", "push", fixture_bytes("gitea", "push"), delivery=GUID)
    # The quest's base already moved (the event is queued, not yet applied): both are taken.
    assert response.status_code == 202
    assert WebhookDelivery.objects.count() == 2


def test_a_trailing_slash_reaches_the_same_endpoint(client, workspace):
    body = fixture_bytes("github", "ping")
    from tests.intake.conftest import sign

    response = client.post(
        "/hooks/github/shop/",
        data=body,
        content_type="application/json",
        headers={"X-GitHub-Event": "ping", "X-GitHub-Delivery": "d-9", **sign("github", body)},
    )
    assert response.json() == {"status": "pong"}


def test_responses_are_json(client, workspace):
    response = deliver(client, "github", "ping", fixture_bytes("github", "ping"))
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {"status": "pong"}


def test_text_no_database_can_store_arrives_replaced_not_as_a_server_error(
    client, workspace, quests
):
    """JSON may spell a NUL or a lone surrogate; PostgreSQL's JSON refuses both."""
    quests.ready("checkout-500")
    payload = fixture("github", "issue_comment")
    payload["comment"]["body"] = "before\u0000after \ud800!"
    payload["comment"]["user"]["login"] = "mo\u0000na"
    response = deliver(client, "github", "issue_comment", payload)
    assert response.status_code == 202
    (row,) = inbound(workspace)
    assert row.payload["body"] == "before\ufffdafter ?!"
    assert row.payload["actor"] == "github:mo\ufffdna"
