"""Issue 17's "done when", through ``ephyra`` commands: a mission with three work packages,
each carried by a quest, goes to COMPLETED, every move made by the person holding the role.
And what the machine refuses: a maker passing their own work, a lead cancelling."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from missions.models import Mission, WorkPackage
from missions.roles import mission_role_grant
from tests.quests.conftest import drive

pytestmark = pytest.mark.django_db(transaction=True)
QUESTS = {"wp1": "checkout-500", "wp2": "rounding-error", "wp3": "stale-cart"}


def grant(shop, username: str, role: str, mission: str = "m1") -> None:
    ada = get_user_model().objects.get(username="ada")
    mission_role_grant(ada, shop, mission, username, role)  # roles are given on the page


@pytest.fixture
def people(server):
    return {name: server.as_(name) for name in ("ada", "mia", "cora")}


def test_a_mission_of_three_work_packages_goes_to_completed_through_ephyra(
    ephyra, server, shop, people
):
    for quest in QUESTS.values():
        drive(shop, quest, "ready")  # the quests that carry the work, each with its proof

    def run(who: str, *args: str) -> str:
        ran = ephyra("missions", *args, env=people[who])
        assert ran.code == 0, f"{who}: ephyra missions {' '.join(args)}: {ran.err}"
        return ran.out

    def move(who: str, role: str, *args: str) -> str:
        return run(who, "move", "m1", "--role", role, *args)

    assert run("ada", "create", "Checkout revamp") == "Mission m1 is created; you are its lead.\n"
    grant(shop, "mia", "maker")
    grant(shop, "cora", "checker")
    titles = ["Fix the rounding of totals", "Keep the cart fresh", "Stop the 500"]
    for number, title in enumerate(titles, start=1):
        assert run("ada", "add-wp", "m1", title) == f"m1: work package wp{number} is added.\n"
    assert move("ada", "lead", "--to", "PLANNING", "-e", "brief: docs/checkout.md") == (
        "m1: m1 is now planning\n"
    )
    for wp, quest in QUESTS.items():
        assert run("ada", "link", "m1", wp, quest) == f"m1: {wp} is carried by quest {quest}.\n"
        assert move("ada", "lead", "--wp", wp, "--to", "ready", "-e", "plan v1") == (
            f"m1: {wp} is now ready\n"
        )
    move("ada", "lead", "--to", "ready", "-e", "plan_validated=all three planned")
    move("ada", "lead", "--to", "running", "-e", "go")
    for wp, quest in QUESTS.items():
        move("ada", "lead", "--wp", wp, "--to", "in-progress", "-e", f"delegated to {quest}")
        assert move("mia", "maker", "--wp", wp, "--to", "CHECKING", "--proof") == (
            f"m1: {wp} is now checking\n"
        )
        assert move("cora", "checker", "--wp", wp, "--to", "done", "-e", "tests green") == (
            f"m1: {wp} is now done\n"
        )
    move("ada", "lead", "--to", "review", "-e", "all three done")
    assert move("cora", "checker", "--to", "completed", "-e", "reviewed") == (
        "m1: m1 is now completed\n"
    )

    mission = Mission.objects.get(workspace=shop, mission_id="m1")
    assert mission.state == "completed"
    packages = WorkPackage.objects.filter(mission=mission).order_by("wp_id")
    assert [(w.wp_id, w.state, w.quest_id) for w in packages] == [
        (wp, "done", quest) for wp, quest in QUESTS.items()
    ]
    listed = ephyra("missions", env=people["ada"]).out
    assert listed.splitlines()[1].split()[:4] == ["m1", "completed", "3", "done"]
    shown = run("cora", "show", "m1")
    assert "state:         completed" in shown
    assert "wp1  done   checkout-500" in shown
    detail = json.loads(run("ada", "show", "m1", "--json"))
    checking = [h for h in detail["history"] if h.get("after") == "checking"]
    assert len(checking) == 3 and all(h["actor"] == "mia" for h in checking)
    assert all(h["evidence"]["result_produced"]["kind"] == "proof" for h in checking)


def test_the_machine_refuses_a_maker_passing_their_own_work_and_a_lead_cancelling(
    ephyra, server, shop, people, tmp_path
):
    drive(shop, "checkout-500", "ready")
    ada, mia = people["ada"], people["mia"]

    def ok(env, *args: str) -> None:
        ran = ephyra("missions", *args, env=env)
        assert ran.code == 0, ran.err

    ok(ada, "create", "Checkout revamp")
    grant(shop, "mia", "maker")
    grant(shop, "mia", "checker")
    ok(ada, "add-wp", "m1", "Fix the rounding")
    ok(ada, "move", "m1", "--role", "lead", "--to", "planning", "-e", "brief")
    ok(ada, "link", "m1", "wp1", "checkout-500")
    ok(ada, "move", "m1", "--wp", "wp1", "--role", "lead", "--to", "ready", "-e", "plan")
    ok(ada, "move", "m1", "--role", "lead", "--to", "ready", "-e", "plan")
    ok(ada, "move", "m1", "--role", "lead", "--to", "running", "-e", "go")
    ok(ada, "move", "m1", "--wp", "wp1", "--role", "lead", "--to", "in_progress", "-e", "go")
    result = tmp_path / "result.txt"
    result.write_text("the totals round half up now\n")
    ok(mia, "move", "m1", "--wp", "wp1", "--role", "maker", "--to", "checking", "--file",
       str(result))  # fmt: skip

    own = ephyra("missions", "move", "m1", "--wp", "wp1", "--role", "checker", "--to", "done",
                 "-e", "looks fine to me", env=mia)  # fmt: skip
    assert own.code == 1
    assert "checker independence: 'mia' produced work package 'wp1'" in own.err
    cancel = ephyra("missions", "move", "m1", "--role", "lead", "--to", "cancelled",
                    "-e", "enough", env=ada)  # fmt: skip
    assert cancel.code == 1
    assert "forbidden: only a human may cancel a mission" in cancel.err
    assert Mission.objects.get(mission_id="m1").state == "running"
    assert WorkPackage.objects.get(wp_id="wp1").state == "checking"
    no_evidence = ephyra("missions", "move", "m1", "--role", "lead", "--to", "review", env=ada)
    assert no_evidence.code == 2
    assert "a move needs its evidence" in no_evidence.err

    # The file handed in is kept by its digest; the lead sends the work back, then gives up
    # on it and supersedes it with a new work package, both in the attempt ledger.
    detail = json.loads(ephyra("missions", "show", "m1", "--json", env=ada).out)
    handed = next(h for h in detail["history"] if h.get("after") == "checking")
    item = handed["evidence"]["result_produced"]
    assert (item["kind"], item["name"], item["size"]) == ("file", "result.txt", 29)
    ok(ada, "move", "m1", "--wp", "wp1", "--role", "lead", "--to", "in_progress",
       "-e", "rounding still off")  # fmt: skip
    ok(ada, "move", "m1", "--wp", "wp1", "--role", "lead", "--to", "failed", "-e", "wrong approach")
    why = "the totals are rounded too late"
    superseded = ephyra("missions", "supersede", "m1", "wp1", "Round in the ledger instead",
                        "--role", "lead", "-e", why, env=ada)  # fmt: skip
    assert (superseded.code, superseded.out) == (0, "m1: wp2 supersedes the failed wp1.\n")
    new = WorkPackage.objects.get(wp_id="wp2")
    assert (new.state, new.supersedes) == ("todo", "wp1")
    shown = ephyra("missions", "show", "m1", env=ada).out
    ledger = shown[shown.index("attempt ledger") :].splitlines()
    assert ledger[1].split()[:4] == ["#", "SUBJECT", "FROM", "TO"]
    assert [line.split()[:4] for line in ledger[2:4]] == [
        ["2", "wp1", "failed", "todo"],  # newest first: the supersede
        ["1", "wp1", "checking", "in_progress"],  # the repair cycle
    ]
