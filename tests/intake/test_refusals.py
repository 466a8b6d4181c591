"""Every way a delivery is refused: the exact status and body, and nothing stored."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from intake.models import Hook
from tests.intake.conftest import counts, deliver, fixture_bytes, sign

pytestmark = pytest.mark.django_db

PUSH = fixture_bytes("github", "push")


@pytest.fixture(autouse=True)
def _hooks(hooks):
    return hooks


def refused(response, status: int, error: str, before) -> None:
    assert response.status_code == status, response.content
    assert response.json() == {"error": error}
    assert counts() == before


@pytest.mark.parametrize("method", ["get", "put", "delete", "patch"])
def test_only_post_is_allowed(client, method):
    before = counts()
    response = getattr(client, method)("/hooks/github/shop")
    refused(response, 405, "only POST is allowed", before)
    assert response["Allow"] == "POST"


def test_an_unknown_workspace_has_no_hook(client):
    before = counts()
    response = deliver(client, "github", "push", PUSH, slug="nowhere")
    refused(response, 404, "no GitHub hook is configured for workspace 'nowhere'", before)


def test_a_forge_without_a_hook_is_not_found(client, hooks):
    hooks["gitlab"].delete()
    before = counts()
    response = deliver(client, "gitlab", "Push Hook", fixture_bytes("gitlab", "push"))
    refused(response, 404, "no GitLab hook is configured for workspace 'shop'", before)


def test_a_disabled_hook_is_not_found(client, hooks):
    Hook.objects.filter(pk=hooks["github"].pk).update(active=False)
    before = counts()
    response = deliver(client, "github", "push", PUSH)
    refused(response, 404, "no GitHub hook is configured for workspace 'shop'", before)


def test_an_unknown_forge_is_not_a_route(client):
    assert (
        client.post(
            "/hooks/bitbucket/shop", data=b"{}", content_type="application/json"
        ).status_code
        == 404
    )


def test_a_wrong_content_type_is_unsupported(client):
    before = counts()
    response = deliver(client, "github", "push", PUSH, content_type="text/plain")
    refused(
        response,
        415,
        "unsupported content type 'text/plain': "
        "send application/json or application/x-www-form-urlencoded",
        before,
    )


def test_gitea_form_deliveries_are_unsupported_because_gitea_signs_the_json_inside(client):
    before = counts()
    body = b"payload=%7B%7D"
    response = deliver(
        client, "gitea", "push", body, content_type="application/x-www-form-urlencoded"
    )
    refused(
        response,
        415,
        "unsupported content type 'application/x-www-form-urlencoded': send application/json",
        before,
    )


@override_settings(EPHYRA_WEBHOOK_MAX_BYTES=1024)
def test_a_body_over_the_limit_is_too_large(client):
    before = counts()
    response = deliver(client, "github", "push", b"{" + b" " * 2000 + b"}")
    refused(response, 413, "the body is larger than 1024 bytes", before)


def test_bytes_past_the_declared_length_are_never_read(client):
    """Content-Length is a claim the read holds the sender to: a body sent longer than declared
    is cut there, so its signature (over the whole body) no longer matches."""
    before = counts()
    response = deliver(client, "github", "push", PUSH, headers={"Content-Length": "10"})
    refused(response, 401, "the signature does not match", before)


def test_a_missing_content_length_is_refused(client):
    before = counts()
    response = client.generic(
        "POST", "/hooks/github/shop", b"", CONTENT_TYPE="application/json", CONTENT_LENGTH=""
    )
    refused(response, 411, "Content-Length is required", before)


def test_a_malformed_content_length_is_refused(client):
    before = counts()
    response = client.generic(
        "POST", "/hooks/github/shop", PUSH, content_type="application/json", CONTENT_LENGTH="ten"
    )
    refused(response, 400, "Content-Length must be a whole number of bytes", before)


@pytest.mark.parametrize(
    ("kind", "event", "header", "error"),
    [
        ("github", "push", "X-Hub-Signature-256", "missing X-Hub-Signature-256 header"),
        (
            "gitea",
            "push",
            "X-Gitea-Signature",
            "missing X-Gitea-Signature or X-Forgejo-Signature header",
        ),
        (
            "forgejo",
            "push",
            "X-Forgejo-Signature",
            "missing X-Forgejo-Signature or X-Gitea-Signature header",
        ),
        ("gitlab", "Push Hook", "X-Gitlab-Token", "missing X-Gitlab-Token header"),
    ],
)
def test_a_missing_signature_is_unauthorised(client, kind, event, header, error):
    before = counts()
    response = deliver(client, kind, event, PUSH, headers={header: ""})
    refused(response, 401, error, before)


@pytest.mark.parametrize(
    ("kind", "event", "error"),
    [
        ("github", "push", "the signature does not match"),
        ("gitea", "push", "the signature does not match"),
        ("forgejo", "push", "the signature does not match"),
        ("gitlab", "Push Hook", "the token does not match"),
    ],
)
def test_a_signature_made_with_another_secret_is_unauthorised(client, kind, event, error):
    before = counts()
    response = deliver(client, kind, event, PUSH, secret="not-the-secret")
    refused(response, 401, error, before)


def test_a_signature_of_another_body_is_unauthorised(client):
    before = counts()
    response = deliver(client, "github", "push", PUSH, headers=sign("github", PUSH + b" "))
    refused(response, 401, "the signature does not match", before)


def test_the_signature_is_checked_before_the_body_is_parsed(client):
    before = counts()
    response = deliver(client, "github", "push", b"not json", secret="wrong")
    refused(response, 401, "the signature does not match", before)


def test_an_unreadable_secret_is_a_server_problem_not_a_forged_delivery(client, monkeypatch):
    monkeypatch.delenv("EPHYRA_TEST_HOOK_SECRET")
    before = counts()
    response = deliver(client, "github", "push", PUSH)
    refused(response, 503, "the hook's secret cannot be read; see the server log", before)


@pytest.mark.parametrize(
    ("kind", "header", "names"),
    [
        ("github", "X-GitHub-Delivery", "X-GitHub-Delivery"),
        ("gitea", "X-Gitea-Delivery", "X-Gitea-Delivery or X-Forgejo-Delivery"),
        ("forgejo", "X-Forgejo-Delivery", "X-Forgejo-Delivery or X-Gitea-Delivery"),
        ("gitlab", "Idempotency-Key", "Idempotency-Key or X-Gitlab-Event-UUID"),
    ],
)
def test_a_delivery_without_its_id_is_refused(client, kind, header, names):
    before = counts()
    event = "Push Hook" if kind == "gitlab" else "push"
    response = deliver(client, kind, event, PUSH, headers={header: ""})
    refused(response, 400, f"missing {names} header", before)


@pytest.mark.parametrize("delivery", ["../etc", "a:b", "x" * 101, "-leading-dash", "sp ace"])
def test_a_delivery_id_that_cannot_name_an_event_is_refused(client, delivery):
    before = counts()
    response = deliver(client, "github", "push", PUSH, delivery=delivery)
    refused(
        response,
        400,
        "X-GitHub-Delivery must be 1 to 100 letters, digits, '.', '_' or '-'",
        before,
    )


def test_a_delivery_without_its_event_name_is_refused(client):
    before = counts()
    response = deliver(client, "github", "", PUSH)
    refused(response, 400, "missing X-GitHub-Event header", before)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{not json", "the body is not valid JSON"),
        (b"\xff\xfe\x00", "the body is not valid JSON"),
        (b"[" * 100000 + b"]" * 100000, "the body is not valid JSON"),
        (b"[1, 2]", "the payload must be a JSON object"),
        (b'"text"', "the payload must be a JSON object"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_refused(client, body, error):
    before = counts()
    with override_settings(EPHYRA_WEBHOOK_MAX_BYTES=300_000):
        response = deliver(client, "github", "push", body)
    refused(response, 400, error, before)


def test_a_github_form_without_its_payload_field_is_refused(client):
    before = counts()
    response = deliver(
        client, "github", "push", b"other=1", content_type="application/x-www-form-urlencoded"
    )
    refused(response, 400, "the form has no payload field", before)


def test_a_push_payload_missing_a_field_is_refused_with_the_field_named(client):
    payload = json.loads(PUSH)
    del payload["after"]
    payload["commits"][0]["id"] = "zzz"
    before = counts()
    response = deliver(client, "github", "push", payload)
    refused(
        response,
        400,
        "invalid push payload: after: Field required; "
        "commits.0.id: String should match pattern '^(?:[0-9a-f]{40}|[0-9a-f]{64})$'",
        before,
    )


@pytest.mark.parametrize(
    ("kind", "event", "error"),
    [
        ("github", "issue_comment", "invalid issue_comment payload: action: Field required"),
        ("gitlab", "Note Hook", "invalid Note Hook payload: user: Field required"),
        ("gitea", "issue_comment", "invalid issue_comment payload: action: Field required"),
    ],
)
def test_a_comment_payload_of_the_wrong_shape_is_refused(client, kind, event, error):
    before = counts()
    response = deliver(client, kind, event, b"{}")
    assert response.status_code == 400
    assert response.json()["error"].startswith(error)
    assert counts() == before


@pytest.mark.parametrize("event", ["push\x00", "push;rm", "x" * 101, " "])
def test_an_event_header_that_is_no_event_name_is_refused(client, event):
    before = counts()
    response = deliver(client, "github", event, PUSH)
    refused(response, 400, "X-GitHub-Event is not an event name", before)
