"""A reviewer in a real browser: finds a quest in the inbox, claims it, approves A, B and C in
turn while the test plays the outside world between them; a second reviewer's approval, sent
from a page shown before the claim, is refused and says why."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from ephyra.compose import BUILTIN_ADAPTERS
from ephyra.core.quest import Quest as QuestValue
from journal.store import Journal
from ledger.inbound import submit_event
from quests.models import Quest, Workspace
from quests.roles import Role, role_grant
from tests.browser.conftest import log_in, shot
from tests.core.lifecycle_helpers import next_event
from tests.core.story import Story
from tests.quests.conftest import PASSING
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shop(tmp_path, settings, serving):
    # The worker applies what people and the test submit; no adapter answers for Ephyra, so
    # the test plays the outside world (reproduction, patch, proof) itself.
    settings.EPHYRA_EFFECT_ADAPTERS = {name: "" for name in BUILTIN_ADAPTERS}
    path = tmp_path / "shop.git"
    Journal.init(path, bare=True)
    workspace = Workspace.objects.create(slug="shop", name="Shop", repository=str(path))
    for name in ("ann", "bob"):
        user = get_user_model().objects.create_user(name, password="pw-for-tests-only")
        role_grant(user, workspace, Role.REVIEWER)
    return workspace


def advance(workspace, story: Story, until: str) -> None:
    """Submit the outside world's next events until the quest is ``until``."""
    for _ in range(12):
        row = Quest.objects.filter(workspace=workspace, quest_id=story.quest).first()
        if row is not None and row.state == until:
            return
        value = None if row is None else QuestValue.from_dict(row.data)
        submit_event(workspace, next_event(story, value, checks=PASSING), source="test")
        head = row.journal_head if row else ""
        moved = Quest.objects.filter(quest_id=story.quest).exclude(journal_head=head)
        assert wait_until(moved.exists, 20), "the worker did not apply the event"
    raise AssertionError(f"{story.quest} never reached {until}")


def test_a_reviewer_claims_and_approves_a_b_and_c_in_the_browser(browser, live_server, shop):
    story = Story("checkout-500")
    advance(shop, story, "hypothesised")

    ann = log_in(browser, live_server.url, "ann")
    shot(ann, "inbox")
    ann.get_by_role("link", name="boom").click()
    ann.wait_for_url("**/q/shop/checkout-500/")
    assert ann.locator(".badge.checkpoint").first.inner_text() == "checkpoint A"
    shot(ann, "quest-at-a")

    bob = log_in(browser, live_server.url, "bob")
    bob.goto(f"{live_server.url}/q/shop/checkout-500/")  # shown before ann claims it

    ann.get_by_role("button", name="Claim the review").click()
    ann.get_by_text("You hold the review.").wait_for()
    assert "review held by ann" in ann.locator("#quest-live").inner_text()
    shot(ann, "quest-claimed")

    bob.get_by_role("button", name="Approve A").click()
    bob.get_by_text("Not done: the quest moved on since you saw it").wait_for()
    assert "review held by ann" in bob.locator("#quest-live").inner_text()
    assert bob.get_by_role("button", name="Approve A").count() == 0  # no longer offered to bob
    shot(bob, "quest-refused-for-bob")

    ann.get_by_role("button", name="Approve A").click()
    ann.get_by_text("Your decision is recorded.").wait_for()
    advance(shop, story, "planned")
    ann.reload()
    ann.get_by_role("button", name="Approve B").click()
    ann.get_by_text("Your decision is recorded.").wait_for()
    advance(shop, story, "ready")
    ann.reload()
    shot(ann, "quest-at-c")
    ann.get_by_role("button", name="Approve C").click()
    ann.get_by_text("Your decision is recorded.").wait_for()

    quest = Quest.objects.get(quest_id="checkout-500")
    assert quest.state == "landing"
    live = ann.locator("#quest-live")
    assert live.locator('g.state.current[data-state="landing"]').count() == 1
    timeline = live.locator(".timeline").inner_text()
    assert timeline.count("checkpoint_decided") == 3 and "claimed" in timeline
    shot(ann, "quest-landing")
