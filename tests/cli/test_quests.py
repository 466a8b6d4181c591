"""Quests through the real ``ephyra`` script against a live server and a worker: login, the
list, one quest, a claim and an approval at a checkpoint, a stale head, and each exit code."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from quests.models import Quest
from tests.cli.conftest import advance
from tests.core.story import Story
from tests.quests.conftest import drive

pytestmark = pytest.mark.django_db(transaction=True)


def test_login_checks_the_token_and_saves_it_readable_by_its_owner_alone(ephyra, server, cli_env):
    token = server.as_("rita")["EPHYRA_TOKEN"]
    ran = ephyra("login", "--url", server.url + "/", "--token", token)
    path = Path(cli_env["XDG_CONFIG_HOME"]) / "ephyra" / "config.json"
    assert ran.code == 0, ran.err
    assert ran.out == f"Logged in to {server.url} as rita; saved to {path}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"url": server.url, "token": token, "workspace": ""}
    who = ephyra("whoami")  # the saved file alone is enough now
    assert who.code == 0, who.err
    assert who.out.splitlines()[0] == f"rita at {server.url}"
    assert who.out.splitlines()[2].split() == ["shop", "reviewer"]


def test_login_reads_the_token_from_stdin_and_refuses_a_wrong_one_saving_nothing(
    ephyra, server, cli_env
):
    path = Path(cli_env["XDG_CONFIG_HOME"]) / "ephyra" / "config.json"
    ran = ephyra("login", "--url", server.url, stdin="eph_not-a-real-token\n")
    assert ran.code == 3
    assert ran.err.startswith("error: ")
    assert not path.exists()
    token = server.as_("rita")["EPHYRA_TOKEN"]
    ran = ephyra("login", "--url", server.url, "--workspace", "shop", stdin=token + "\n")
    assert ran.code == 0, ran.err
    assert json.loads(path.read_text())["workspace"] == "shop"


def columns(line: str) -> list[int]:
    """Where each cell of a table line starts."""
    starts, previous = [], " "
    for index, char in enumerate(line):
        if char != " " and previous == " " and (index == 0 or line[index - 2 : index] == "  "):
            starts.append(index)
        previous = char
    return starts


def test_quests_is_an_aligned_table_filtered_as_asked_and_json_for_scripts(ephyra, server, shop):
    drive(shop, "checkout-500", "hypothesised")
    drive(shop, "a-much-longer-quest-name", "researching")
    rita = server.as_("rita")
    ran = ephyra("quests", env=rita)
    assert ran.code == 0, ran.err
    header, *rows = ran.out.splitlines()
    assert header.split() == ["QUEST", "STATE", "CP", "SEVERITY", "CLAIMED", "BY", "SIGNALS",
                              "TITLE"]  # fmt: skip
    assert len(rows) == 2
    state_column = header.index("STATE")
    assert {row[state_column:].split()[0] for row in rows} == {"hypothesised", "researching"}
    assert all(row.index("boom") == header.index("TITLE") for row in rows)
    assert "\x1b[" not in ran.out  # no colour in a pipe

    only = ephyra("quests", "--checkpoint", "A", env=rita)
    assert [line.split()[0] for line in only.out.splitlines()[1:]] == ["shop/checkout-500"]
    in_shop = ephyra("quests", "-w", "shop", "--checkpoint", "A", env=rita)
    assert [line.split()[0] for line in in_shop.out.splitlines()[1:]] == ["checkout-500"]
    scripted = json.loads(ephyra("quests", "--json", "--state", "researching", env=rita).out)
    assert [q["id"] for q in scripted["results"]] == ["a-much-longer-quest-name"]
    assert scripted["results"][0]["workspace"] == "shop"


def test_show_gives_the_state_the_path_the_timeline_and_the_proof(ephyra, server, shop):
    drive(shop, "checkout-500", "ready")
    ran = ephyra("show", "checkout-500", env=server.as_("rita"))
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    assert lines[0] == "shop/checkout-500  boom"
    assert "state:      ready at checkpoint C" in lines
    path = next(line for line in lines if line.startswith("path:"))
    assert path.split(" > ")[0] == "path:       sensed"
    assert "[ready(C)] > landing > watching > closed" in path
    assert "hypothesised(A)" in path and "planned(B)" in path
    proof = next(line for line in lines if line.startswith("proof:"))
    assert proof.startswith("proof: passed (1/1 checks passed) sha256:")
    assert "  ok  tests" in lines
    timeline = lines[lines.index("timeline") + 1 :]
    assert timeline[0].split() == ["AT", "TYPE", "ACTOR", "OUTCOME", "SUMMARY"]
    assert any("proof_completed" in line for line in timeline)


def test_a_reviewer_claims_then_approves_at_the_checkpoint(ephyra, server, shop):
    story = Story("checkout-500")
    advance(shop, story, "hypothesised")
    rita = server.as_("rita")
    claimed = ephyra("claim", "checkout-500", env=rita)
    assert claimed.code == 0, claimed.err
    assert claimed.out == "claim: applied; shop/checkout-500 is now handed_off at checkpoint A\n"
    mine = ephyra("quests", "--mine", "-w", "shop", env=rita).out.splitlines()
    assert [line.split()[:3] for line in mine[1:]] == [["checkout-500", "handed_off", "A"]]
    assert ephyra("quests", "--unclaimed", "-w", "shop", env=rita).out == "No quests match.\n"
    approved = ephyra("approve", "checkout-500", "-m", "the hypothesis holds", env=rita)
    assert approved.code == 0, approved.err
    quest = Quest.objects.get(quest_id="checkout-500")
    assert approved.out == f"decide: applied; shop/checkout-500 is now {quest.state}\n"
    assert quest.state == "reproducing"
    timeline = json.loads(ephyra("show", "checkout-500", "--json", env=rita).out)["timeline"]
    decided = next(t for t in timeline if t["type"] == "checkpoint_decided")
    assert "rita" in decided["actor"]


def test_an_action_on_a_quest_that_moved_since_it_was_read_exits_one_and_says_so(
    ephyra, server, shop
):
    drive(shop, "checkout-500", "hypothesised")
    rita = server.as_("rita")
    seen = json.loads(ephyra("show", "checkout-500", "--json", env=rita).out)["head"]
    assert ephyra("claim", "checkout-500", env=rita).code == 0
    now = Quest.objects.get(quest_id="checkout-500")
    ran = ephyra("approve", "checkout-500", "--checkpoint", "A", "--head", seen, env=rita)
    assert ran.code == 1
    assert ran.err.startswith("error: ")
    assert "the quest moved on since you saw it" in ran.err
    assert f"now handed_off at revision {now.revision}" in ran.err
    assert ran.err.endswith(f"(head {now.journal_head[:12]})\n")
    assert Quest.objects.get(quest_id="checkout-500").journal_head == now.journal_head


def test_a_refusal_by_the_machine_exits_one_with_its_reason(ephyra, server, shop):
    drive(shop, "checkout-500", "researching")
    ran = ephyra("claim", "checkout-500", env=server.as_("rita"))
    assert ran.code == 1
    assert "a review can be claimed only at a checkpoint" in ran.err


def test_bad_input_exits_two_naming_the_field(ephyra, server, shop):
    drive(shop, "checkout-500", "hypothesised")
    ran = ephyra("comment", "checkout-500", "-m", "", env=server.as_("rita"))
    assert ran.code == 2
    assert "  body: " in ran.err
    assert Quest.objects.get(quest_id="checkout-500").state == "hypothesised"


def test_an_unknown_quest_another_workspace_or_a_wrong_token_exit_three(ephyra, server, shop):
    rita = server.as_("rita")
    assert ephyra("show", "nope", env=rita).code == 3
    assert ephyra("show", "other/anything", env=rita).code == 3
    wrong = ephyra("quests", env={**rita, "EPHYRA_TOKEN": "eph_wrong"})
    assert wrong.code == 3
    assert wrong.err.startswith("error: ")
    staff = ephyra("audit", "verify", env=server.as_("rita"))  # a reviewer may not audit
    assert staff.code == 3


def test_pause_resume_release_and_kill_act_and_say_where_the_quest_now_is(ephyra, server, shop):
    drive(shop, "checkout-500", "hypothesised")
    rita = server.as_("rita")
    paused = ephyra("pause", "checkout-500", "-m", "waiting for the vendor", env=rita)
    assert (paused.code, paused.out) == (0, "pause: applied; shop/checkout-500 is now parked\n")
    resumed = ephyra("resume", "shop/checkout-500", env=rita)
    assert resumed.out == "resume: applied; shop/checkout-500 is now hypothesised at checkpoint A\n"
    assert ephyra("claim", "checkout-500", env=rita).code == 0
    released = ephyra("release", "checkout-500", env=rita)
    assert (
        released.out == "release: applied; shop/checkout-500 is now hypothesised at checkpoint A\n"
    )
    commented = ephyra("comment", "checkout-500", "-m", "looked at it", env=rita)
    assert commented.code == 0, commented.err
    no_reason = ephyra("kill", "checkout-500", env=rita)
    assert no_reason.code == 2  # a kill says why
    denied = ephyra("kill", "checkout-500", "-m", "not ours to fix", env=rita)
    assert (denied.code, denied.err) == (3, "error: kill in shop needs the role admin\n")
    ada = server.as_("ada")
    killed = ephyra("kill", "checkout-500", "-m", "not ours to fix", "--json", env=ada)
    assert killed.code == 0, killed.err
    answer = json.loads(killed.out)
    assert (answer["status"], answer["quest"]["state"]) == ("applied", "abandoned")


def test_a_retry_with_the_same_key_and_head_applies_an_action_once(ephyra, server, shop):
    drive(shop, "checkout-500", "hypothesised")
    rita = server.as_("rita")
    head = json.loads(ephyra("show", "checkout-500", "--json", env=rita).out)["head"]
    once = ["comment", "checkout-500", "-m", "once", "--key", "k-1", "--head", head, "--json"]
    first, again = ephyra(*once, env=rita), ephyra(*once, env=rita)
    assert (first.code, again.code) == (0, 0), again.err
    assert json.loads(first.out)["event"] == json.loads(again.out)["event"]
    timeline = json.loads(ephyra("show", "checkout-500", "--json", env=rita).out)["timeline"]
    assert [t["type"] for t in timeline].count("comment_added") == 1
    # The same key for another request is refused, not applied.
    other = ephyra("comment", "checkout-500", "-m", "twice", "--key", "k-1", env=rita)
    assert other.code == 1
    assert "this Idempotency-Key was used for a different request" in other.err


def test_past_the_rate_the_server_cannot_be_used_now_exit_four(ephyra, server, shop, settings):
    rita = server.as_("rita")
    settings.EPHYRA_API_RATE_LIMIT = 2
    settings.EPHYRA_API_RATE_WINDOW = 1_000_000  # fixed windows: no boundary mid-test
    assert ephyra("whoami", env=rita).code == 0
    assert ephyra("whoami", env=rita).code == 0
    limited = ephyra("whoami", env=rita)
    assert limited.code == 4
    assert "(retry after " in limited.err


def test_workspaces_lists_those_the_token_reads_with_the_roles(ephyra, server, shop):
    ran = ephyra("workspaces", env=server.as_("ada"))
    assert ran.code == 0, ran.err
    assert [line.split() for line in ran.out.splitlines()] == [
        ["WORKSPACE", "NAME", "ROLES"],
        ["shop", "Shop", "admin"],
    ]
