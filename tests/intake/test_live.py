"""Through a real HTTP server with a real HTTP client, as a forge reaches Ephyra."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from intake.models import WebhookDelivery
from ledger.models import InboundEvent
from tests.intake.conftest import fixture_bytes, sign

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("committed")]

GUID = "5c1e0a3e-8f4b-11ef-9d2a-3b7c4e5f6a7b"


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict, dict]:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), dict(error.headers)


def test_a_signed_push_over_http_is_accepted_and_a_forged_one_refused(live_server, hooks, quests):
    quests.ready("checkout-500")
    body = fixture_bytes("github", "push")
    url = f"{live_server.url}/hooks/github/shop"
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/044aadd",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": GUID,
        "X-GitHub-Hook-ID": "109948940",
    }

    forged = post(url, body, headers | sign("github", body, secret="guessed"))
    assert forged[:2] == (401, {"error": "the signature does not match"})
    assert WebhookDelivery.objects.count() == 0

    status, answer, _ = post(url, body, headers | sign("github", body))
    assert (status, answer) == (202, {"status": "accepted", "events": 1})
    assert list(InboundEvent.objects.values_list("event_id", "type")) == [
        (f"gh-{GUID}-0", "base_moved")
    ]

    status, answer, _ = post(url, body, headers | sign("github", body))
    assert (status, answer) == (200, {"status": "duplicate"})


def test_a_get_over_http_is_told_to_post(live_server, hooks):
    request = urllib.request.Request(f"{live_server.url}/hooks/gitlab/shop", method="GET")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 405
    assert caught.value.headers["Allow"] == "POST"
    assert json.loads(caught.value.read()) == {"error": "only POST is allowed"}
