"""The land, rebase and rollback adapters, delivered by the worker in this process against a
real remote: what lands, and which event each outcome feeds back to the quest."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from ephyra.compose import dependencies
from ephyra.core.quest import Quest as QuestValue
from ephyra.policy.autonomy import policy_digest
from ledger.models import Operation
from quests.engine import quest_apply
from quests.models import PolicyVersion, Quest, Workspace
from tests.core.lifecycle_helpers import HOLDER, next_event, passed
from tests.core.story import Story, bundle_for
from tests.landing.conftest import APP, git
from worker.loop import Worker

FIX = ("return sum(items)", "return sum(items or [])")
PASSED = passed("tests")
State = Operation.State


@pytest.fixture
def shop(repos, db) -> Workspace:
    return Workspace.objects.create(
        slug="shop", name="Shop", repository=str(repos.mirror), remote=str(repos.remote)
    )


@pytest.fixture
def worker(shop):
    worker = Worker(owner="w-landing")
    yield worker
    worker.release()


def quest(ws: Workspace, quest_id: str = "q1") -> QuestValue:
    return QuestValue.from_dict(Quest.objects.get(workspace=ws, quest_id=quest_id).data)


def apply(ws: Workspace, event) -> QuestValue:
    outcome = quest_apply(ws, event)
    assert outcome.applied.decision.accepted, outcome.applied.decision.reason
    return quest(ws, event.quest)


def to_landing(ws: Workspace, story: Story, base: str, head: str) -> QuestValue:
    """Main-line events applied directly (test set-up) up to the land operation; the patch is
    the real one."""
    value = None
    while value is None or str(value.state) != "landing":
        if value is not None and str(value.state) == "patching":
            event = story("patch_recorded", head=head, base=base)
        elif value is not None and str(value.state) == "proving":
            event = story("proof_completed", **bundle_for(value, checks=PASSED))
        else:
            event = next_event(story, value)
        value = apply(ws, event)
    return value


def use_policy(ws: Workspace, text: str) -> None:
    version = PolicyVersion.objects.create(
        workspace=ws, digest=policy_digest(text), text=text, reviewed_by="ann"
    )
    ws.policy = version
    ws.save(update_fields=["policy"])


def op(ws: Workspace, type_: str) -> Operation:
    return Operation.objects.filter(workspace=ws, type=type_).latest("id")


def test_an_approved_quest_lands_on_the_remote_and_watches(repos, shop, worker):
    base, head = repos.patch([FIX])
    to_landing(shop, Story("q1"), base, head)

    worker.step()

    assert repos.tip() == head
    landed = quest(shop)
    assert (str(landed.state), landed.landed_commit) == ("watching", head)
    land = op(shop, "land")
    assert land.state == State.SUCCEEDED
    assert land.outcome["detail"] == {"commit": head, "style": "fast-forward", "already": False}


def test_a_merge_landing_names_the_quest_its_revision_and_the_proof(repos, shop, worker):
    use_policy(shop, "version: 1\nlanding: {style: merge}\n")
    base, head = repos.patch([FIX])
    proven = to_landing(shop, Story("q1"), base, head)

    worker.step()

    landed = quest(shop)
    assert repos.tip() == landed.landed_commit != head
    assert repos.message(landed.landed_commit).endswith(
        f"Ephyra-Quest: q1\nEphyra-Revision: 1\nEphyra-Proof: {proven.proof_digest}"
    )
    assert repos.message(landed.landed_commit).startswith("Merge ephyra/q1/r1\n")


def test_a_base_that_moved_is_rebased_onto_and_the_quest_proves_again(repos, shop, worker):
    base, head = repos.patch([FIX])
    to_landing(shop, Story("q1"), base, head)
    moved = repos.push_as_person("hello ", "hi ", "Friendlier greeting")

    worker.step()

    assert repos.tip() == moved  # nothing was written over it
    assert op(shop, "land").outcome["events"][0]["type"] == "base_moved"
    assert op(shop, "rebase").state == State.SUCCEEDED
    rebased = quest(shop)
    assert (str(rebased.state), rebased.base, rebased.revision) == ("proving", moved, 1)
    assert rebased.patch_head == git(repos.mirror, "rev-parse", "refs/heads/ephyra/q1/r1")
    assert git(repos.mirror, "merge-base", "--is-ancestor", moved, rebased.patch_head) == ""
    assert op(shop, "run_proof").payload == {
        "head": rebased.patch_head,
        "base": moved,
        "revision": 1,
    }


def test_a_rebase_that_conflicts_parks_the_quest_with_the_files(repos, shop, worker):
    base, head = repos.patch([FIX])
    to_landing(shop, Story("q1"), base, head)
    repos.push_as_person("return sum(items)", "return sum(items, 0)", "Start at zero")

    worker.step()

    parked = quest(shop)
    assert (str(parked.state), parked.park_reason) == ("parked", "rebase_conflict")
    assert op(shop, "notify_inbox").payload["files"] == ["app.py"]
    assert git(repos.mirror, "rev-parse", "refs/heads/ephyra/q1/r1") == head


def test_a_patch_that_cannot_land_as_the_policy_allows_parks_the_quest(repos, shop, worker):
    _, head = repos.patch([FIX])
    moved = repos.push_as_person("hello ", "hi ", "Friendlier greeting")
    repos.fetch_into_mirror()
    # A person recorded the patch against the new base: it does not fast-forward from it.
    to_landing(shop, Story("q1"), moved, head)

    worker.step()

    parked = quest(shop)
    assert (str(parked.state), parked.park_reason) == ("parked", "not_fast_forward")
    assert "the policy allows no other style" in op(shop, "notify_inbox").payload["detail"]
    assert repos.tip() == moved


def test_a_workspace_without_a_remote_parks_a_landing_quest(repos, shop, worker):
    shop.remote = ""
    shop.save(update_fields=["remote"])
    base, head = repos.patch([FIX])
    to_landing(shop, Story("q1"), base, head)

    worker.step()

    assert quest(shop).park_reason == "no_remote"


def landed_and_watching(repos, shop, worker) -> Story:
    story = Story("q1")
    base, head = repos.patch([FIX])
    to_landing(shop, story, base, head)
    worker.step()
    assert str(quest(shop).state) == "watching"
    return story


def test_a_regression_rolls_the_patch_back_and_the_quest_researches_again(repos, shop, worker):
    story = landed_and_watching(repos, shop, worker)
    later = repos.push_as_person("hello ", "hi ", "Friendlier greeting")
    apply(shop, story("regression_observed", summary="5xx up"))

    worker.step()

    revert = repos.tip()
    assert repos.parents(revert) == [later]
    assert repos.read(revert) == APP.replace("hello ", "hi ")
    again = quest(shop)
    assert (str(again.state), again.revision) == ("researching", 2)
    confirmed = op(shop, "rollback").outcome["events"][0]
    assert (confirmed["type"], confirmed["commit"]) == ("rollback_confirmed", revert)


def test_a_conflicting_rollback_parks_then_confirms_a_persons_revert_on_resume(repos, shop, worker):
    story = landed_and_watching(repos, shop, worker)
    later = repos.push_as_person("sum(items or [])", "sum(items or ())", "Tuples are fine")
    apply(shop, story("regression_observed", summary="5xx up"))

    worker.step()

    parked = quest(shop)
    assert (str(parked.state), parked.park_reason) == ("parked", "rollback_conflict")
    assert op(shop, "notify_inbox").payload["files"] == ["app.py"]
    assert repos.tip() == later
    # A person reverts by hand, then resumes the quest: the rollback is asked again and finds
    # nothing left to revert.
    by_hand = repos.push_as_person("sum(items or ())", "sum(items)", "Revert the fix by hand")
    apply(shop, story("resumed", actor=HOLDER))
    worker.step()

    assert repos.tip() == by_hand
    assert (str(quest(shop).state), quest(shop).revision) == ("researching", 2)


def test_an_unreadable_credentials_file_stops_the_worker_at_start(settings, tmp_path):
    settings.EPHYRA_GIT_CREDENTIALS_FILE = tmp_path / "missing"
    with pytest.raises(ImproperlyConfigured, match="is not a file this worker can read"):
        dependencies()
    (tmp_path / "present").write_text("https://ann:s3cret@git.example.com\n")
    settings.EPHYRA_GIT_CREDENTIALS_FILE = tmp_path / "present"
    assert dependencies().git_credentials_file == tmp_path / "present"
