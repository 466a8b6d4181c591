"""Two copies of one delivery arriving at once: the unique delivery id lets one through."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test import Client

from intake.models import WebhookDelivery
from ledger.models import InboundEvent
from tests.intake.conftest import deliver, fixture_bytes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("committed")]

GUID = "0b9e7c38-d0a1-11ee-8b6a-2f1d0e8c7a55"


@pytest.mark.skipif(
    connection.vendor == "sqlite",
    # The test database is SQLite's shared in-memory one, whose table locks fail at once
    # rather than wait; on a file (the embedded default) a second writer waits its turn.
    reason="needs a database with concurrent writers: run with DATABASE_URL=postgres://…",
)
def test_two_identical_deliveries_at_once_are_processed_once(hooks, quests, workspace):
    quests.ready("checkout-500")
    quests.landing("cart-total")
    body = fixture_bytes("github", "push")
    start = threading.Barrier(2)
    answers: list[tuple[int, dict]] = []

    def send() -> None:
        try:
            start.wait(timeout=10)
            response = deliver(Client(), "github", "push", body, delivery=GUID)
            answers.append((response.status_code, response.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(answers, key=lambda a: a[0]) == [
        (200, {"status": "duplicate"}),
        (202, {"status": "accepted", "events": 2}),
    ]
    assert WebhookDelivery.objects.filter(delivery_id=GUID).count() == 1
    assert sorted(InboundEvent.objects.values_list("event_id", flat=True)) == [
        f"gh-{GUID}-0",
        f"gh-{GUID}-1",
    ]


def test_a_redelivery_after_the_first_committed_is_a_duplicate(hooks, quests, workspace):
    quests.ready("checkout-500")
    body = fixture_bytes("github", "push")
    first = deliver(Client(), "github", "push", body, delivery=GUID)
    again = deliver(Client(), "github", "push", body, delivery=GUID)
    assert (first.status_code, again.status_code, again.json()) == (
        202,
        200,
        {"status": "duplicate"},
    )
    assert InboundEvent.objects.count() == 1
