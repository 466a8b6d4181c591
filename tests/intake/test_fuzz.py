"""Random bodies and headers at every endpoint: an answer from the documented table, never a
500, and a refusal stores nothing. Bodies are signed correctly half the time, so the fuzzing
reaches the payload parsing and not only the signature check."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.intake.conftest import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SECRET,
    counts,
    fixture,
    sign,
)

pytestmark = pytest.mark.django_db

CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "application/x-www-form-urlencoded",
    "text/plain",
    "",
]
STATUSES = {200, 202, 400, 401, 404, 405, 411, 413, 415}
EVENTS = {
    "github": [
        "push",
        "ping",
        "issue_comment",
        "pull_request",
        "pull_request_review_comment",
        "deployment_status",
        "check_run",
        "status",
        "star",
    ],
    "gitlab": ["Push Hook", "Note Hook", "Merge Request Hook", "Deployment Hook", "Pipeline Hook"],
    "gitea": ["push", "issue_comment", "pull_request", "create"],
    "forgejo": ["push", "issue_comment", "pull_request"],
}
FIXTURES = [
    ("github", "push"),
    ("github", "issue_comment"),
    ("github", "pull_request"),
    ("github", "deployment_status"),
    ("github", "check_run"),
    ("gitlab", "push"),
    ("gitlab", "note"),
    ("gitlab", "deployment"),
    ("gitlab", "pipeline"),
    ("gitea", "push"),
    ("gitea", "issue_comment"),
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=25,
)


@st.composite
def mutated_fixture(draw) -> bytes:
    """A real payload with one field replaced, removed or given odd text."""
    payload = copy.deepcopy(fixture(*draw(st.sampled_from(FIXTURES))))
    node = payload
    while isinstance(node, dict) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node)))
        if not isinstance(node[key], dict):
            break
        node = node[key]
    if isinstance(node, dict) and node:
        key = draw(st.sampled_from(sorted(node)))
        if draw(st.booleans()):
            del node[key]
        else:
            node[key] = draw(
                json_values | st.sampled_from(["\x00", "\ud800", "ephyra/q1", "0" * 40])
            )
    return json.dumps(payload).encode()


bodies = (
    st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()) | mutated_fixture()
)
header_text = st.text(max_size=40) | st.sampled_from(["", "x", "d-1", "sha256=00", "push"])


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(sorted(EVENT_HEADER)),
    slug=st.sampled_from(["shop", "nowhere"]),
    method=st.sampled_from(["POST"] * 9 + ["GET", "PUT"]),
    body=bodies,
    signed=st.booleans(),
    event=st.none() | header_text,
    known_event=st.booleans(),
    delivery=st.none() | header_text | st.uuids().map(str),
    content_type=st.sampled_from(CONTENT_TYPES),
    extra=st.dictionaries(
        st.sampled_from(
            ["X-Hub-Signature-256", "X-Gitlab-Token", "X-Gitea-Signature", "Content-Length"]
        ),
        header_text,
        max_size=2,
    ),
)
def test_any_request_gets_a_documented_answer_and_a_refusal_stores_nothing(
    client,
    hooks,
    quests,
    kind,
    slug,
    method,
    body,
    signed,
    event,
    known_event,
    delivery,
    content_type,
    extra,
):
    if known_event and event is not None:
        event = EVENTS[kind][len(event) % len(EVENTS[kind])]
    headers = {}
    if event is not None:
        headers[EVENT_HEADER[kind]] = event
    if delivery is not None:
        headers[DELIVERY_HEADER[kind]] = delivery
    if signed:
        headers.update(sign(kind, body, SECRET))
    headers.update(extra)
    content_length = headers.pop("Content-Length", None)
    meta = {"CONTENT_LENGTH": content_length} if content_length is not None else {}
    before = counts()

    response = client.generic(
        method, f"/hooks/{kind}/{slug}", body, content_type=content_type, headers=headers, **meta
    )

    assert response.status_code in STATUSES, response.content
    answer = response.json()
    if response.status_code >= 400:
        assert set(answer) == {"error"} and answer["error"]
        assert counts() == before
    else:
        assert answer["status"] in {
            "accepted",
            "processed",
            "recorded",
            "ignored",
            "pong",
            "duplicate",
        }


@pytest.fixture
def quests(quests):
    """One quest whose base matters and one that is watching, so payloads can reach them."""
    quests.ready("checkout-500")
    quests.watching("cart-total")
    return quests
