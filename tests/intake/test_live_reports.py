"""Deployments, checks and comments through a real HTTP server, applied by the worker's own
code (under a lease, through the engine), as they reach a running Ephyra: what each forge's
delivery does to the quest, and that a secret pasted into a comment or a check reaches neither
the database, nor the journal, nor the log."""

from __future__ import annotations

import json
import logging

import pygit2
import pytest

from intake.models import WebhookDelivery
from ledger.lease import lease_acquire
from ledger.models import InboundEvent
from quests.models import Quest
from tests.intake.conftest import PATCH, fixture, sign
from tests.intake.test_live import post
from tests.intake.test_secrets import database_text, journal_bytes
from worker import inbound as applying

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("committed")]

EVENT_HEADER = {
    "github": "X-GitHub-Event",
    "gitlab": "X-Gitlab-Event",
    "gitea": "X-Gitea-Event",
    "forgejo": "X-Forgejo-Event",
}
DELIVERY_HEADER = {
    "github": "X-GitHub-Delivery",
    "gitlab": "X-Gitlab-Event-UUID",
    "gitea": "X-Gitea-Delivery",
    "forgejo": "X-Forgejo-Delivery",
}


def send(live_server, kind: str, event: str, payload: dict, delivery_id: str):
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        EVENT_HEADER[kind]: event,
        DELIVERY_HEADER[kind]: delivery_id,
        **sign(kind, body),
    }
    return post(f"{live_server.url}/hooks/{kind}/shop", body, headers)


def work(workspace) -> list[InboundEvent]:
    """What the workspace's worker does: take the lease, apply each queued event in order."""
    fence = lease_acquire(workspace.pk, "test-worker")
    assert fence is not None
    for row in InboundEvent.objects.filter(workspace=workspace).order_by("id"):
        applying.apply_inbound(fence, workspace, row)
    return list(InboundEvent.objects.filter(workspace=workspace).order_by("id"))


def quest_data(workspace, quest_id: str) -> dict:
    return Quest.objects.get(workspace=workspace, quest_id=quest_id).data


def commits(workspace, n: int, line: str = "main") -> list[str]:
    """``n`` commits, each the child of the one before, in the workspace's mirror; another
    ``line`` starts a history of its own."""
    repo = pygit2.Repository(workspace.repository)
    who = pygit2.Signature("Ann", "ann@example.com", 1764680000, 0)
    tree = repo.TreeBuilder().write()
    made: list[pygit2.Oid] = []
    for i in range(n):
        parents = made[-1:]
        made.append(repo.create_commit(None, who, who, f"{line} {i}", tree, parents))
    return [str(oid) for oid in made]


# --- deployments -------------------------------------------------------------------------------


def github_deployment(sha: str, environment: str = "production") -> dict:
    payload = fixture("github", "deployment_status")
    payload["deployment"] |= {"sha": sha, "environment": environment}
    payload["deployment_status"]["environment"] = environment
    return payload


def test_a_deployment_of_a_later_commit_starts_the_watch_of_the_quest_it_carries(
    live_server, hooks, quests, workspace
):
    landed, later = commits(workspace, 2)
    quests.watching("checkout-500", commit=landed)
    status, answer, _ = send(
        live_server, "github", "deployment_status", github_deployment(later), "d-1"
    )
    assert (status, answer) == (202, {"status": "accepted", "events": 1})
    (row,) = work(workspace)
    assert (row.type, row.state, row.payload["commit"], row.payload["includes"]) == (
        "deployment_observed",
        "applied",
        later,
        landed,
    )
    data = quest_data(workspace, "checkout-500")
    assert (data["state"], data["deployed_commit"], data["deployed_to"]) == (
        "watching",
        later,
        "production",
    )
    assert data["deployed_at"] == "2026-12-02T15:04:11+00:00"


def test_a_deployment_the_mirror_cannot_place_is_recorded_and_moves_no_quest(
    live_server, hooks, quests, workspace
):
    (landed,) = commits(workspace, 1)
    (unrelated,) = commits(workspace, 1, line="elsewhere")
    quests.watching("checkout-500", commit=landed)
    unknown = "ab" * 20  # a commit the mirror has not fetched
    for n, sha in enumerate([unrelated, unknown]):
        status, answer, _ = send(
            live_server, "github", "deployment_status", github_deployment(sha), f"d-{n}"
        )
        assert (status, answer) == (200, {"status": "recorded"})
    assert InboundEvent.objects.count() == 0
    assert [r.quests for r in WebhookDelivery.objects.order_by("id")] == [[], []]
    assert quest_data(workspace, "checkout-500")["deployed_commit"] is None


def test_a_gitlab_deployment_hook_is_observed_over_http(live_server, hooks, quests, workspace):
    (landed,) = commits(workspace, 1)
    quests.watching("checkout-500", commit=landed)
    payload = fixture("gitlab", "deployment")
    payload |= {
        "short_sha": landed[:8],
        "commit_url": f"https://gitlab.example.com/acme/shop/-/commit/{landed}",
    }
    status, answer, _ = send(live_server, "gitlab", "Deployment Hook", payload, "gl-1")
    assert (status, answer) == (202, {"status": "accepted", "events": 1})
    (row,) = work(workspace)
    assert row.state == "applied"
    assert quest_data(workspace, "checkout-500")["deployed_commit"] == landed


# --- checks ------------------------------------------------------------------------------------

CHECKS = [
    ("github", "check_run", "check_run", "tests (3.11)", True),
    ("github", "status", "status", "ci/tests", False),
    ("gitlab", "Pipeline Hook", "pipeline", "pipeline", False),
    ("gitea", "status", "status", "ci / tests (push)", False),
    ("forgejo", "status", "status", "ci / tests (push)", False),
]


@pytest.mark.parametrize(("kind", "event", "name", "check", "passed"), CHECKS)
def test_each_forges_check_result_reaches_the_quest_over_http(
    live_server, hooks, quests, workspace, kind, event, name, check, passed
):
    quests.ready("checkout-500", head=PATCH)
    payload = fixture("gitea" if kind == "forgejo" else kind, name)
    status, answer, _ = send(live_server, kind, event, payload, "c-1")
    assert (status, answer) == (202, {"status": "accepted", "events": 1})
    (row,) = work(workspace)
    assert (row.type, row.state) == ("checks_reported", "applied")
    data = quest_data(workspace, "checkout-500")
    assert (data["state"], data["checks_head"], data["failing_checks"]) == (
        "ready",
        PATCH,
        [] if passed else [check],
    )
    # A redelivery is acknowledged and changes nothing.
    status, answer, _ = send(live_server, kind, event, payload, "c-1")
    assert (status, answer) == (200, {"status": "duplicate"})
    assert InboundEvent.objects.count() == 1


# --- redaction ---------------------------------------------------------------------------------

GITHUB_TOKEN = "ghp_R2d4x9Qk7LmN3pV8sT1wY6zB0cF5hJ2kM4nQ"
PASSWORD = "Tr0ub4dor-and-3"
AWS_KEY = "AKIAZ7QX3MPLE4KEYS2Q"
URL_PASSWORD = "hunter2-in-a-url"


def test_a_secret_pasted_into_a_comment_or_a_check_is_stored_and_logged_nowhere(
    live_server, hooks, quests, workspace, caplog
):
    caplog.set_level(logging.DEBUG)
    quests.ready("checkout-500", head=PATCH)
    comment = fixture("github", "issue_comment")
    comment["comment"]["body"] = (
        f"It fails with my token {GITHUB_TOKEN}, and the config says password={PASSWORD} "
        f"and the key is {AWS_KEY}. Please fix."
    )
    status, answer, _ = send(live_server, "github", "issue_comment", comment, "s-1")
    assert (status, answer) == (202, {"status": "accepted", "events": 1})

    check = fixture("github", "status")
    check |= {
        "context": f"deploy password={PASSWORD}",
        "target_url": f"https://ci:{URL_PASSWORD}@ci.example.com/builds/1187",
    }
    status, answer, _ = send(live_server, "github", "status", check, "s-2")
    assert (status, answer) == (202, {"status": "accepted", "events": 1})

    rows = work(workspace)
    assert [(r.type, r.state) for r in rows] == [
        ("comment_added", "applied"),
        ("checks_reported", "applied"),
    ]
    body = rows[0].payload["body"]
    assert "[redacted:github-token]" in body and "Please fix." in body  # the rest stays readable
    assert quest_data(workspace, "checkout-500")["comments"] == 1

    stored, journal = database_text(), journal_bytes(workspace)
    for secret in (GITHUB_TOKEN, PASSWORD, AWS_KEY, URL_PASSWORD):
        assert secret not in stored, secret
        assert secret.encode() not in journal, secret
        assert secret not in caplog.text, secret
    assert b"[redacted:github-token]" in journal  # the journal was written, and redacted
