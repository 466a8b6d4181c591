"""One mission through the pages in a real browser: an admin creates it from the top bar, gives
the roles, plans a work package and links the quest that carries it; the maker hands in the
quest's proof, which the checker passes; the lead sends it to review and the checker completes
it. Screenshots of each step go where the other browser tests put theirs."""

from __future__ import annotations

import pytest

from missions.models import Mission, WorkPackage
from quests.models import Workspace
from quests.roles import Role
from tests.browser.conftest import log_in, shot
from tests.quests.conftest import drive, person

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shop(tmp_path, settings, serving):
    from journal.store import Journal

    settings.DATA_DIR = tmp_path / "data"
    path = tmp_path / "shop.git"
    Journal.init(path, bare=True)
    workspace = Workspace.objects.create(slug="shop", name="Shop", repository=str(path))
    person("ada", shop=[Role.ADMIN])
    person("mia", shop=[Role.REVIEWER])
    person("cora", shop=[Role.REVIEWER])
    drive(workspace, "checkout-500", "ready")  # the quest that will carry the work, proven
    return workspace


def make(page, where, to: str, evidence: str = "", *, proof: bool = False) -> None:
    """Open the move to ``to`` in the region ``where`` and send it with its evidence."""
    move = where.locator("details.move", has_text=f"→ {to}")
    move.locator("summary").click()
    if proof:
        assert move.locator("input[value=proof]").is_checked()  # offered first for a result
    else:
        move.locator("textarea[name=evidence_text]").fill(evidence)
    move.get_by_role("button", name=f"Move to {to}").click()
    page.locator(".messages .success").wait_for()


def test_one_mission_goes_to_completed_through_the_pages(browser, live_server, shop):
    ada = log_in(browser, live_server.url, "ada")
    ada.get_by_role("link", name="Missions").click()
    ada.wait_for_url("**/missions/")
    ada.get_by_label("Title").fill("Checkout revamp")
    ada.get_by_role("button", name="Create the mission").click()
    ada.wait_for_url("**/missions/shop/m1/")
    ada.get_by_text("Mission m1 is created; you are its lead.").wait_for()
    for name, role in (("mia", "maker"), ("cora", "checker")):
        people = ada.get_by_role("region", name="People")
        people.get_by_label("Account").fill(name)
        people.locator("select[name=role]").select_option(role)
        people.get_by_role("button", name="Apply").click()
        ada.get_by_text(f"{name} now holds the role {role}.").wait_for()
    ada.get_by_label("New work package").fill("Fix the rounding of totals")
    ada.get_by_role("button", name="Add").click()
    ada.get_by_text("The work package is added.").wait_for()
    shot(ada, "mission-created")

    head = ada.get_by_label("Mission moves")
    card = ada.locator("#wp-wp1")
    make(ada, head, "PLANNING", "brief: docs/checkout.md")
    card.locator("summary", has_text="Link a quest").click()
    card.get_by_label("An existing quest's id").fill("checkout-500")
    card.get_by_role("button", name="Link").click()
    ada.get_by_text("wp1 is carried by quest checkout-500.").wait_for()
    make(ada, card, "READY", "plan v1")
    make(ada, head, "READY", "plan v1 validated")
    make(ada, head, "RUNNING", "go")
    make(ada, card, "IN PROGRESS", "delegated to checkout-500")
    shot(ada, "mission-running")

    mia = log_in(browser, live_server.url, "mia")
    mia.goto(f"{live_server.url}/missions/shop/m1/")
    make(mia, mia.locator("#wp-wp1"), "CHECKING", proof=True)
    assert "proof" in mia.locator("#wp-wp1").inner_text()

    cora = log_in(browser, live_server.url, "cora")
    cora.goto(f"{live_server.url}/missions/shop/m1/")
    shot(cora, "mission-checking")
    make(cora, cora.locator("#wp-wp1"), "DONE", "tests green; diff read")
    ada.reload()
    make(ada, ada.get_by_label("Mission moves"), "REVIEW", "wp1 done")
    cora.reload()
    make(cora, cora.get_by_label("Mission moves"), "COMPLETED", "review passed")
    shot(cora, "mission-completed")

    mission = Mission.objects.get(mission_id="m1")
    assert mission.state == "completed"
    assert WorkPackage.objects.get(mission=mission).checker == "cora"
    history = cora.get_by_role("heading", name="History").locator("..").inner_text()
    assert "quest checkout-500 proof sha256:" in history
    cora.get_by_role("link", name="Missions", exact=True).click()
    row = cora.locator("tr", has_text="Checkout revamp")
    assert "completed" in row.inner_text() and "done 1" in row.inner_text()
    shot(cora, "missions-list")
