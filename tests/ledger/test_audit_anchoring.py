"""When the audit chain is anchored in Git: every N entries and at each checkpoint decision,
after the transaction commits, never for a rolled-back entry, never breaking the change."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db import transaction

from ephyra.replay import read_events
from journal.anchor import anchor_history, read_anchor
from journal.store import Journal
from ledger.audit import AuditBroken, audit_anchor, audit_append, audit_check
from ledger.models import AuditEntry
from quests.engine import quest_apply
from quests.models import Workspace
from tests.audit_tampering import audit_triggers_disabled

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
REF = "refs/ephyra/audit/shop"


def main_line():
    with (ROOT / "docs" / "examples" / "main-line.jsonl").open() as handle:
        return list(read_events(handle))


@pytest.fixture
def shop(tmp_path):
    path = tmp_path / "mirror.git"
    Journal.init(path, bare=True)
    return Workspace.objects.create(slug="shop", name="Shop", repository=str(path))


def anchored(workspace) -> list[int]:
    return [a.sequence for a in anchor_history(workspace.repository, workspace.slug)]


def hashes(workspace) -> dict[int, str]:
    return dict(
        AuditEntry.objects.filter(workspace=workspace).values_list("sequence", "entry_hash")
    )


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def test_the_chain_is_anchored_every_n_entries_and_at_each_checkpoint_decision(
    shop, settings, django_capture_on_commit_callbacks
):
    settings.EPHYRA_AUDIT_ANCHOR_EVERY = 4
    for event in main_line():  # each quest_apply commits on its own, as in production
        with django_capture_on_commit_callbacks(execute=True):
            quest_apply(shop, event)
    # every 4th entry, and the decisions at checkpoints A, B and C (entries #5, #7, #12)
    assert anchored(shop) == [4, 5, 7, 8, 12, 16]
    stored = hashes(shop)
    for anchor in anchor_history(shop.repository, "shop"):
        assert anchor.entry_hash == stored[anchor.sequence]
    decisions = AuditEntry.objects.filter(workspace=shop, action="quest.checkpoint_decided")
    assert sorted(decisions.values_list("sequence", flat=True)) == [5, 7, 12]
    assert audit_check(shop).summary() == "shop: verified 16 entries (anchored at #16)"


def test_plain_git_log_shows_the_anchors(shop, django_capture_on_commit_callbacks):
    for event in main_line():
        with django_capture_on_commit_callbacks(execute=True):
            quest_apply(shop, event)
    log = git("--git-dir", shop.repository, "log", "--format=%s", REF)
    assert log.splitlines() == [
        "audit shop: anchored at entry #12 (quest.checkpoint_decided)",
        "audit shop: anchored at entry #7 (quest.checkpoint_decided)",
        "audit shop: anchored at entry #5 (quest.checkpoint_decided)",
    ]
    trailers = git(
        "--git-dir", shop.repository, "log", "-1", "--format=%(trailers:only,unfold)", REF
    )
    assert trailers.splitlines()[:3] == [
        "Ephyra-Audit-Workspace: shop",
        "Ephyra-Audit-Sequence: 12",
        f"Ephyra-Audit-Hash: {hashes(shop)[12]}",
    ]


def test_entries_due_in_one_transaction_get_one_anchor_at_the_last_when_it_commits(
    shop, settings, django_capture_on_commit_callbacks
):
    settings.EPHYRA_AUDIT_ANCHOR_EVERY = 4
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        for event in main_line():
            quest_apply(shop, event)
    assert read_anchor(shop.repository, "shop") is None  # nothing before the commit
    assert len(callbacks) == 1
    callbacks[0]()
    assert anchored(shop) == [16]  # it covers #4, #5, #7, #8 and #12 too
    assert audit_check(shop).summary() == "shop: verified 16 entries (anchored at #16)"


def test_an_anchor_waiting_for_a_rolled_back_transaction_does_not_swallow_the_next(
    shop, django_capture_on_commit_callbacks
):
    decided = {
        "at": datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
        "actor": "ann",
        "action": "quest.checkpoint_decided",
        "object": "quest:q1",
        "payload": {},
    }
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_append(shop, **decided)
        raise RuntimeError("rolled back")
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        audit_append(shop, **decided)
    assert anchored(shop) == [1]


def test_a_rolled_back_entry_is_never_anchored(shop, django_capture_on_commit_callbacks):
    with (
        django_capture_on_commit_callbacks(execute=True) as callbacks,
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        audit_append(
            shop,
            at=datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
            actor="ann",
            action="quest.checkpoint_decided",
            object="quest:q1",
            payload={},
        )
        raise RuntimeError("the change this entry records failed")
    assert callbacks == []
    assert read_anchor(shop.repository, "shop") is None
    assert not AuditEntry.objects.filter(workspace=shop).exists()


def test_a_failed_anchor_is_logged_and_the_next_one_covers_it(
    shop, caplog, django_capture_on_commit_callbacks
):
    events = main_line()
    lock = Path(shop.repository) / "refs" / "ephyra" / "audit" / "shop.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")  # another writer holds the ref through checkpoint A's decision
    with caplog.at_level(logging.ERROR, logger="ledger.audit"):
        for event in events[:5]:
            with django_capture_on_commit_callbacks(execute=True):
                outcome = quest_apply(shop, event)
    assert outcome.applied.decision.accepted  # the decision stands
    assert AuditEntry.objects.filter(workspace=shop).count() == 5
    assert read_anchor(shop.repository, "shop") is None
    assert [r.getMessage() for r in caplog.records if r.name == "ledger.audit"] == [
        "audit log of shop not anchored at entry #5; the next anchor covers it"
    ]
    lock.unlink()
    for event in events[5:7]:
        with django_capture_on_commit_callbacks(execute=True):
            quest_apply(shop, event)
    assert anchored(shop) == [7]  # checkpoint B's anchor covers A's decision too
    assert audit_check(shop).ok


def test_a_chain_broken_since_the_last_anchor_is_not_anchored_and_says_why(
    shop, caplog, django_capture_on_commit_callbacks
):
    """An automatic anchor checks the entries since the previous anchor (a bounded read):
    it never vouches for a chain that was edited after it was last anchored."""
    events = main_line()
    for event in events[:6]:
        with django_capture_on_commit_callbacks(execute=True):
            quest_apply(shop, event)
    assert anchored(shop) == [5]
    with audit_triggers_disabled():
        AuditEntry.objects.filter(workspace=shop, sequence=6).update(actor="mallory")
    with (
        caplog.at_level(logging.ERROR, logger="ledger.audit"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        quest_apply(shop, events[6])  # checkpoint B's decision, entry #7
    assert anchored(shop) == [5]
    assert [r.getMessage() for r in caplog.records if r.name == "ledger.audit"] == [
        "audit log not anchored: shop: entry #6 was edited: its content does not match its hash"
    ]


def test_anchoring_on_demand_covers_the_current_head_once(shop):
    for event in main_line()[:3]:
        quest_apply(shop, event)  # no commit in this test's transaction: nothing anchored yet
    assert read_anchor(shop.repository, "shop") is None
    anchor = audit_anchor(shop)
    assert (anchor.sequence, anchor.entry_hash) == (3, hashes(shop)[3])
    assert audit_anchor(shop) is None  # nothing new
    assert read_anchor(shop.repository, "shop") == anchor


def test_anchoring_on_demand_refuses_a_chain_broken_since_the_last_anchor(shop):
    for event in main_line()[:6]:
        quest_apply(shop, event)
    first = audit_anchor(shop)
    for event in main_line()[6:9]:
        quest_apply(shop, event)
    with audit_triggers_disabled():
        AuditEntry.objects.filter(workspace=shop, sequence=8).update(payload={})
    with pytest.raises(AuditBroken) as broken:
        audit_anchor(shop)
    assert broken.value.problem == "entry #8 was edited: its content does not match its hash"
    assert read_anchor(shop.repository, "shop") == first


def test_anchoring_an_empty_log_writes_nothing(shop):
    assert audit_anchor(shop) is None
    assert read_anchor(shop.repository, "shop") is None


def test_the_interval_defaults_to_100_and_a_bad_value_is_named(settings, tmp_path):
    assert settings.EPHYRA_AUDIT_ANCHOR_EVERY == 100
    env = os.environ | {
        "EPHYRA_AUDIT_ANCHOR_EVERY": "0",
        "EPHYRA_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "EPHYRA_AUDIT_ANCHOR_EVERY must be at least 1, got 0" in done.stderr
