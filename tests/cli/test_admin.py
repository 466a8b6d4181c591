"""What an admin does from a terminal: settle an ambiguous write, verify the audit chain, and
change the policy with four eyes, through the real ``ephyra`` script and a live server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ephyra.compose import effect_adapters
from ledger.models import AuditEntry, Operation
from quests.models import PolicyProposal
from tests.audit_tampering import audit_triggers_disabled
from tests.ledger import recorder
from tests.quests.conftest import drive
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_POLICY = ROOT / "ephyra" / "policy" / "default.yaml"


@pytest.fixture
def outside(settings, serving):
    """Landing goes to the in-process outside world, which answers nothing (a timeout)."""
    recorder.reset()
    settings.EPHYRA_EFFECT_ADAPTERS = {
        **settings.EPHYRA_EFFECT_ADAPTERS,
        "land": "tests.ledger.recorder.Recorder",
    }
    recorder.BEHAVIOUR["land"] = "raise"
    effect_adapters.cache_clear()
    yield recorder
    recorder.reset()


def test_an_admin_lists_an_ambiguous_write_and_resolves_it(ephyra, server, shop, outside):
    drive(shop, "q1", "landing")
    land = Operation.objects.filter(workspace=shop, quest_id="q1", type="land")
    assert wait_until(lambda: land.filter(state="ambiguous").exists(), 20)
    key = land.get().key
    ada = server.as_("ada")

    listed = ephyra("ledger", "--state", "ambiguous", env=ada)
    assert listed.code == 0, listed.err
    header, *rows = listed.out.splitlines()
    assert header.split() == ["KEY", "TYPE", "STATE", "QUEST", "ATTEMPTS", "UPDATED"]
    assert [row.split()[:4] for row in rows] == [[key, "land", "ambiguous", "q1"]]

    ran = ephyra("ledger", "resolve", key, "--verdict", "done", "-m", "it is on main", env=ada)
    assert ran.code == 0, ran.err
    assert ran.out == f"{key}: done; succeeded\n"
    assert wait_until(lambda: land.get().state == "succeeded", 20)
    assert land.get().outcome["resolved_by"] == "ada"

    again = ephyra("ledger", "resolve", key, "--verdict", "dead", "-m", "x", env=ada)
    assert again.code == 1  # nothing waits for a verdict any more: the machine refuses
    assert ephyra("ledger", "resolve", key, "--verdict", "done", "-m", "x",
                  env=server.as_("rita")).code == 3  # fmt: skip


def test_audit_verify_says_the_chain_holds_then_names_the_entry_edited(ephyra, server, shop):
    drive(shop, "q1", "hypothesised")
    ada = server.as_("ada")
    entries = AuditEntry.objects.filter(workspace=shop).count()
    ran = ephyra("audit", "verify", env=ada)
    assert (ran.code, ran.out) == (0, f"shop: the audit chain holds ({entries} entries) ok\n")

    listed = ephyra("audit", env=ada)
    assert listed.out.splitlines()[0].split() == ["SEQ", "AT", "ACTOR", "ACTION", "OBJECT"]
    assert len(listed.out.splitlines()) == 1 + AuditEntry.objects.filter(workspace=shop).count()

    with audit_triggers_disabled():
        AuditEntry.objects.filter(workspace=shop, sequence=2).update(actor="mallory")
    broken = ephyra("audit", "verify", env=ada)
    assert broken.code == 1
    assert broken.out == (
        "shop: the audit chain is BROKEN at entry 2 (1 verified before it)\n"
        "entry #2 was edited: its content does not match its hash\n"
    )
    assert json.loads(ephyra("audit", "verify", "--json", env=ada).out)["first_bad"] == 2


def test_a_policy_is_proposed_by_one_admin_approved_by_another_and_shown(
    ephyra, server, shop, tmp_path
):
    text = DEFAULT_POLICY.read_text().replace("attempts: 3", "attempts: 4")
    assert "attempts: 4" in text
    mine = tmp_path / "policy.yaml"
    mine.write_text(text)
    ada, adam = server.as_("ada"), server.as_("adam")

    proposed = ephyra("policy", "propose", str(mine), "-m", "one more try", env=ada)
    assert proposed.code == 0, proposed.err
    proposal = PolicyProposal.objects.get(workspace=shop)
    assert proposed.out.startswith("Proposed sha256:")
    assert f"as proposal {proposal.pk}" in proposed.out

    own = ephyra("policy", "approve", str(proposal.pk), env=ada)
    assert own.code == 3  # four eyes: not one's own
    assert "four eyes" in own.err
    approved = ephyra("policy", "approve", str(proposal.pk), env=adam)
    assert (approved.code, approved.out) == (0, f"proposal {proposal.pk}: approved\n")

    shown = ephyra("policy", "show", env=ada)
    assert shown.out == text
    again = ephyra("policy", "propose", str(DEFAULT_POLICY), env=ada)
    assert again.code == 0, again.err
    second = PolicyProposal.objects.latest("pk").pk
    withdrawn = ephyra("policy", "withdraw", str(second), env=ada)
    assert (withdrawn.code, withdrawn.out) == (0, f"proposal {second}: withdrawn\n")
    assert ephyra("policy", "propose", str(DEFAULT_POLICY), env=ada).code == 0
    third = PolicyProposal.objects.latest("pk").pk
    rejected = ephyra("policy", "reject", str(third), "-m", "keep 4", env=adam)
    assert (rejected.code, rejected.out) == (0, f"proposal {third}: rejected\n")
    assert ephyra("policy", "show", env=ada).out == text  # still the approved one
    versions = ephyra("policy", "versions", env=ada).out.splitlines()
    assert versions[1].split()[:3] == ["1", proposal.version.digest[:19], "current"]


def test_an_invalid_policy_is_refused_before_anything_is_sent(ephyra, server, shop, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nproof:\n  attempts: 0\n")
    ran = ephyra("policy", "propose", str(bad), env=server.as_("ada"))
    assert ran.code == 2
    assert f"{bad}:3: proof.attempts: Input should be greater than or equal to 1" in ran.err
    assert not PolicyProposal.objects.exists()
