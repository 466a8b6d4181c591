"""Two admins in a real browser: one checks and proposes a policy change, the other reads the
diff and approves it; then an ingest token is made and shown once."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from journal.store import Journal
from quests.models import PolicyProposal, Workspace
from quests.roles import Role, role_grant
from tests.audit_tampering import erase_audit_log
from tests.browser.conftest import log_in, shot

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shop(tmp_path, transactional_db, settings):
    settings.DATA_DIR = tmp_path / "data"
    path = tmp_path / "shop.git"
    Journal.init(path, bare=True)
    workspace = Workspace.objects.create(slug="shop", name="Shop", repository=str(path))
    for name in ("ann", "bob"):
        user = get_user_model().objects.create_user(name, password="pw-for-tests-only")
        role_grant(user, workspace, Role.ADMIN)
    yield workspace
    erase_audit_log()  # the append-only audit rows would refuse the flush after the test


def test_an_admin_proposes_a_policy_change_and_a_second_admin_approves_it(
    browser, live_server, shop
):
    ann = log_in(browser, live_server.url, "ann")
    ann.get_by_role("link", name="Workspaces").click()
    ann.wait_for_url("**/workspaces/")
    shot(ann, "workspaces")
    ann.get_by_role("link", name="shop", exact=True).click()
    ann.get_by_role("link", name="Policy: versions, proposals, editor").click()
    ann.wait_for_url("**/w/shop/policy/")

    editor = ann.get_by_label("Policy (YAML)")
    editor.fill(editor.input_value().replace("attempts: 3", "attempts: 0"))
    ann.get_by_role("button", name="Check").click()  # htmx: the result region alone
    problems = ann.locator("#policy-check .problems")
    problems.wait_for()
    assert re.fullmatch(
        r"\d+: proof\.attempts: Input should be greater than or equal to 1",
        problems.inner_text().strip(),
    )
    assert ann.url.endswith("/w/shop/policy/")  # no page load
    shot(ann, "policy-check")

    editor.fill(editor.input_value().replace("attempts: 0", "attempts: 5"))
    ann.get_by_label("Why (for the approver)").fill("three tries are too few for our flaky CI")
    ann.get_by_role("button", name="Propose", exact=True).click()
    ann.get_by_text("another admin of shop approves or rejects it").wait_for()
    assert ann.get_by_role("button", name="Approve: make it the current policy").count() == 0
    assert "You proposed this." in ann.content()
    shot(ann, "policy-proposed")

    bob = log_in(browser, live_server.url, "bob")
    bob.goto(f"{live_server.url}/w/shop/policy/")
    assert bob.locator("pre.diff .dl.added").first.inner_text() == "+  attempts: 5"
    shot(bob, "policy-to-approve")
    bob.get_by_role("button", name="Approve: make it the current policy").click()
    bob.get_by_text("is now the policy of shop").wait_for()
    shot(bob, "policy-approved")
    shop.refresh_from_db()
    assert "attempts: 5" in shop.policy.text
    assert PolicyProposal.objects.get().decided_by.username == "bob"

    bob.goto(f"{live_server.url}/w/shop/")
    bob.get_by_label("What it is for (optional)").fill("checkout")
    bob.get_by_role("button", name="Make a token").click()
    token = bob.locator("#new-token").input_value()
    assert len(token) >= 43
    shot(bob, "workspace-token-once")
    bob.goto(f"{live_server.url}/w/shop/")
    assert token not in bob.content() and f"{token[:8]}…" in bob.content()
    shot(bob, "workspace")
