"""A new error the deployment brought usually starts in the deployment's own minute: the watch
must still count it as new when it goes on after that minute (found by the demo's rollback
scenario, where the revert breaks receipts from the first request on)."""

from __future__ import annotations

from tests.watch.conftest import count, landed, minutes_ago, quest, settle, stored, watch
from tests.watch.test_watch import deploy


def test_a_new_error_that_starts_in_the_deployments_own_minute_is_new(repos, shop, worker):
    head = landed(shop, repos, worker)
    at = minutes_ago(5)
    deploy(shop, head, at)
    stored(shop, "fp-new", at, "app.py")
    count(shop, "fp-new", at, 2)  # the new code's first errors, in the deployment's minute
    count(shop, "fp-new", minutes_ago(3), 4)  # and on after it

    settle(worker)

    judged = watch(shop)
    assert (judged.state, judged.figures["new_fingerprints"]) == ("regression", ["fp-new"])
    assert str(quest(shop).state) == "researching"


def test_an_error_seen_before_the_deployments_minute_is_not_new(repos, shop, worker):
    head = landed(shop, repos, worker)
    at = minutes_ago(5)
    deploy(shop, head, at)
    stored(shop, "fp-old", minutes_ago(7), "app.py")
    count(shop, "fp-old", minutes_ago(7), 1)
    count(shop, "fp-old", minutes_ago(3), 1)

    settle(worker)

    assert watch(shop).figures["new_fingerprints"] == []
    assert str(quest(shop).state) == "watching"
