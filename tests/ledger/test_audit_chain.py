"""Tampering with the audit log is found at the entry where it happened, with the reason.

The log is built the real way: the main-line story through ``quest_apply``, each transaction
committing its on-commit anchors (at the checkpoint decisions: entries #5, #7 and #12). Then a
database owner tampers, past the append-only triggers.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ephyra.replay import read_events
from journal.anchor import anchor_history
from journal.store import Journal
from ledger.audit import GENESIS, audit_append, audit_check, audit_verify, entry_digest
from ledger.models import AuditEntry
from quests.engine import quest_apply
from quests.models import Workspace
from tests.audit_tampering import audit_triggers_disabled

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"


def main_line():
    with (EXAMPLES / "main-line.jsonl").open() as handle:
        return list(read_events(handle))


@pytest.fixture
def shop(tmp_path, django_capture_on_commit_callbacks):
    path = tmp_path / "mirror.git"
    Journal.init(path, bare=True)
    workspace = Workspace.objects.create(slug="shop", name="Shop", repository=str(path))
    for event in main_line():
        with django_capture_on_commit_callbacks(execute=True):
            quest_apply(workspace, event)
    assert [a.sequence for a in anchor_history(path, "shop")] == [5, 7, 12]
    return workspace


def rows(workspace):
    return AuditEntry.objects.filter(workspace=workspace)


def check(workspace):
    result = audit_check(workspace)
    return result.verified, result.broken_at, result.problem


def test_an_untouched_log_verifies_against_its_anchors(shop):
    result = audit_check(shop)
    assert (result.verified, result.problem, result.anchor.sequence) == (16, None, 12)
    assert result.summary() == "shop: verified 16 entries (anchored at #12)"
    assert audit_verify(shop) == (16, None)


def test_an_edited_payload_is_found_at_its_entry(shop):
    with audit_triggers_disabled():
        rows(shop).filter(sequence=9).update(payload={"event": "e009", "to": "closed"})
    assert check(shop) == (8, 9, "entry #9 was edited: its content does not match its hash")
    assert audit_check(shop).summary() == (
        "shop: BROKEN: entry #9 was edited: its content does not match its hash"
    )


def test_an_edit_with_a_recomputed_hash_breaks_the_next_link(shop):
    entry = rows(shop).get(sequence=9)
    entry.actor = "mallory"
    entry.entry_hash = entry_digest(entry)
    with audit_triggers_disabled():
        entry.save()
    assert check(shop) == (
        9,
        10,
        "entry #10 does not chain from entry #9: entries were reordered or replaced",
    )


def test_a_deleted_entry_is_found_as_a_gap(shop):
    with audit_triggers_disabled():
        rows(shop).filter(sequence=9).delete()
    assert check(shop) == (8, 9, "entry #9 was deleted: the log goes from #8 to #10")


def test_several_deleted_entries_are_named_as_a_range(shop):
    with audit_triggers_disabled():
        rows(shop).filter(sequence__in=[9, 10, 11]).delete()
    assert check(shop) == (8, 9, "entries #9 to #11 were deleted: the log goes from #8 to #12")


def test_a_deleted_first_entry_is_found(shop):
    with audit_triggers_disabled():
        rows(shop).filter(sequence=1).delete()
    assert check(shop) == (0, 1, "entry #1 was deleted: the log starts at #2")


def test_two_swapped_entries_are_found_as_reordered(shop):
    with audit_triggers_disabled():
        rows(shop).filter(sequence=9).update(sequence=1000)  # (workspace, sequence) is unique
        rows(shop).filter(sequence=10).update(sequence=9)
        rows(shop).filter(sequence=1000).update(sequence=10)
    assert check(shop) == (
        8,
        9,
        "entry #9 does not chain from entry #8: entries were reordered or replaced",
    )


def test_a_tail_truncated_below_the_last_anchor_is_found(shop):
    with audit_triggers_disabled():
        rows(shop).filter(sequence__gte=10).delete()
    assert check(shop) == (
        9,
        10,
        "the log ends at entry #9 but the anchor in Git names entry #12: "
        "entries #10 to #12 were truncated",
    )


def test_an_emptied_log_is_found_by_its_anchor(shop):
    with audit_triggers_disabled():
        rows(shop).delete()
    assert check(shop) == (
        0,
        1,
        "the log is empty but the anchor in Git names entry #12: entries #1 to #12 were truncated",
    )


def test_entries_after_the_last_anchor_are_only_as_safe_as_the_triggers(shop):
    """The boundary docs/audit.md states: the tail past the last anchor can be cut unseen."""
    with audit_triggers_disabled():
        rows(shop).filter(sequence__gte=13).delete()
    assert audit_check(shop).summary() == "shop: verified 12 entries (anchored at #12)"


def test_a_chain_rebuilt_consistently_from_scratch_is_found_only_by_the_anchor(shop):
    original = list(rows(shop).order_by("sequence"))
    with audit_triggers_disabled():
        rows(shop).delete()
    for entry in original:  # the same story, with one decision's actor quietly changed
        audit_append(
            shop,
            at=entry.at,
            actor="mallory" if entry.sequence == 6 else entry.actor,
            action=entry.action,
            object=entry.object,
            payload=entry.payload,
        )
    rebuilt = list(rows(shop).order_by("sequence"))
    # Every hash and every link holds: only Git remembers what the head was.
    assert all(entry_digest(e) == e.entry_hash for e in rebuilt)
    links = [GENESIS] + [e.entry_hash for e in rebuilt[:-1]]
    assert [e.previous_hash for e in rebuilt] == links
    assert check(shop) == (
        6,
        7,
        f"entry #7 has hash {rebuilt[6].entry_hash} but the anchor in Git names "
        f"{original[6].entry_hash}: the log was rebuilt after it was anchored",
    )
    # Anchored #5 came before the change and still holds; #7 is the first anchor it moved.
    assert rebuilt[4].entry_hash == original[4].entry_hash


def test_unreadable_anchors_fail_the_check_rather_than_pass_it(shop, tmp_path):
    Workspace.objects.filter(pk=shop.pk).update(repository=str(tmp_path / "gone.git"))
    shop.refresh_from_db()
    result = audit_check(shop)
    assert not result.ok
    assert result.problem.startswith("the anchors in Git cannot be read: no Git repository at ")


def test_the_example_in_docs_audit_md_is_the_hash_the_code_computes(db):
    page = (ROOT / "docs" / "audit.md").read_text(encoding="utf-8")
    line = next(x for x in page.splitlines() if x.startswith('{"action":'))
    documented = re.search(r"its `entry_hash` is `(sha256:[0-9a-f]{64})`", page).group(1)
    assert "sha256:" + hashlib.sha256(line.encode()).hexdigest() == documented
    entry = AuditEntry(
        sequence=5,
        at=datetime(2026, 11, 30, 8, 15, tzinfo=UTC),
        actor="ann",
        action="quest.checkpoint_decided",
        object="quest:checkout-500",
        payload={
            "effects": ["checkout-500:1:start_agent:e005:0"],
            "event": "e005",
            "from": "hypothesised",
            "revision": 1,
            "to": "reproducing",
        },
        previous_hash="sha256:" + "ab" * 32,
    )
    assert entry_digest(entry) == documented
