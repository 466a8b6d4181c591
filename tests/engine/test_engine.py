"""The engine: decide, journal first, then projection + ledger + audit in one transaction;
repair rebuilds the database side from Git."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ephyra.replay import read_events
from journal.store import Journal
from ledger.audit import audit_verify
from ledger.models import AuditEntry, Operation
from quests.engine import quest_apply
from quests.models import Quest
from quests.repair import repair_workspace
from tests.audit_tampering import audit_triggers_disabled
from tests.core.story import Story

pytestmark = pytest.mark.django_db

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def events_of(name: str):
    with (EXAMPLES / name).open() as handle:
        return list(read_events(handle))


def apply_all(workspace, events):
    return [quest_apply(workspace, event) for event in events]


def snapshot():
    """Every projection, field by field, and every ledger row: what repair must restore."""
    quests = {
        q.quest_id: {f.name: getattr(q, f.name) for f in Quest._meta.fields if f.name not in {"id"}}
        for q in Quest.objects.all()
    }
    operations = {
        op.key: (op.type, op.payload, op.state, op.journal_commit, op.quest_id)
        for op in Operation.objects.all()
    }
    return quests, operations


def _crash():
    raise RuntimeError("crash after the journal write")


def test_applying_the_main_line_projects_the_journal_head(workspace):
    outcomes = apply_all(workspace, events_of("main-line.jsonl"))
    journal = Journal(workspace.repository)
    quest, head = journal.load("checkout-500")
    row = Quest.objects.get(workspace=workspace, quest_id="checkout-500")
    assert row.state == "closed" == str(quest.state)
    assert row.journal_head == str(head) == str(outcomes[-1].applied.head)
    assert row.data == quest.to_dict()
    assert len(journal.history("checkout-500")) == 16


def test_every_journaled_effect_has_one_pending_ledger_row(workspace):
    apply_all(workspace, events_of("main-line.jsonl"))
    journal = Journal(workspace.repository)
    journaled = [e["key"] for entry in journal.history("checkout-500") for e in entry.effects]
    assert sorted(Operation.objects.values_list("key", flat=True)) == sorted(journaled)
    assert set(Operation.objects.values_list("state", flat=True)) == {"pending"}
    land = Operation.objects.get(key="checkout-500:1:land:e012:0")
    assert land.type == "land" and land.payload["head"].startswith("4be1d7a")


def test_each_accepted_event_is_audited_in_a_verified_chain(workspace):
    apply_all(workspace, events_of("main-line.jsonl"))
    assert AuditEntry.objects.filter(workspace=workspace).count() == 16
    first = AuditEntry.objects.get(workspace=workspace, sequence=1)
    assert first.action == "quest.signal_sensed" and first.object == "quest:checkout-500"
    assert audit_verify(workspace) == (16, None)


def test_each_signal_a_quest_takes_is_in_its_journal(workspace):
    apply_all(workspace, events_of("intake-routes.jsonl"))
    journal = Journal(workspace.repository)
    taken = [
        (entry.event.signal.id, quest_id)
        for quest_id in journal.heads()
        for entry in journal.history(quest_id)
        if entry.event.type in {"signal_sensed", "signal_merged", "regression_reopened"}
    ]
    assert sorted(taken) == [
        ("sig-20", "login-npe"),
        ("sig-21", "login-npe"),
        ("sig-30", "debug-noise"),
        ("sig-40", "login-npe-2"),
    ]


def test_a_refused_event_changes_neither_git_nor_the_database(workspace):
    story = Story("q1")
    quest_apply(workspace, story.signal())
    journal = Journal(workspace.repository)
    before_head = journal.head("q1")
    before = snapshot(), AuditEntry.objects.count()
    outcome = quest_apply(workspace, story("landed", commit="f" * 40))
    assert outcome.applied.decision.outcome == "refused"
    assert outcome.applied.decision.reason == "only a landing quest can land; the quest is sensed"
    assert journal.head("q1") == before_head
    assert (snapshot(), AuditEntry.objects.count()) == before


def test_a_crash_between_git_and_the_database_is_repaired(workspace):
    events = events_of("main-line.jsonl")
    apply_all(workspace, events[:7])

    def crash():
        raise RuntimeError("power cut after the journal write")

    with pytest.raises(RuntimeError, match="power cut"):
        quest_apply(workspace, events[7], after_journal=crash)  # patch_recorded → proving
    row = Quest.objects.get(quest_id="checkout-500")
    assert row.state == "patching"  # the database never saw the transition
    assert not Operation.objects.filter(key="checkout-500:1:run_proof:e008:0").exists()

    report = repair_workspace(workspace)
    assert report.projections_updated == ["checkout-500"]
    assert report.operations_created == ["checkout-500:1:run_proof:e008:0"]
    row.refresh_from_db()
    assert row.state == "proving"
    op = Operation.objects.get(key="checkout-500:1:run_proof:e008:0")
    assert (op.state, op.type, op.payload["head"][:7]) == ("pending", "run_proof", "4be1d7a")

    again = repair_workspace(workspace)
    assert not again.changed
    assert again.summary() == (
        "repair: 1 workspaces, 1 quests checked; 0 projections created, 0 updated, "
        "0 ledger operations restored"
    )


def test_after_a_crash_the_next_event_catches_the_database_up_by_itself(workspace):
    events = events_of("main-line.jsonl")
    apply_all(workspace, events[:7])
    with pytest.raises(RuntimeError):
        quest_apply(workspace, events[7], after_journal=_crash)
    apply_all(workspace, events[8:10])  # the journal head is the truth: these decide on it
    assert Quest.objects.get(quest_id="checkout-500").state == "proving"
    # The missed transition's effect was restored when the engine saw the row behind Git.
    assert Operation.objects.filter(key="checkout-500:1:run_proof:e008:0").exists()
    assert not repair_workspace(workspace).changed


def test_a_projection_at_another_head_is_not_overwritten_blindly_but_followed_to_git(workspace):
    events = events_of("main-line.jsonl")
    apply_all(workspace, events[:6])
    # Someone (a stale writer, a hand edit) left the row at a head this commit does not build on.
    Quest.objects.filter(quest_id="checkout-500").update(journal_head="0" * 40, state="sensed")
    Operation.objects.filter(key__contains=":e006:").delete()
    outcome = quest_apply(workspace, events[6])
    row = Quest.objects.get(quest_id="checkout-500")
    journal = Journal(workspace.repository)
    assert row.journal_head == str(journal.head("checkout-500")) == str(outcome.applied.head)
    assert row.state == str(journal.load("checkout-500")[0].state)
    # The row's recorded head was unknown, so the whole journal was read: e006's rows are back.
    assert Operation.objects.filter(key__contains=":e006:").exists()
    assert not repair_workspace(workspace).changed


def test_repair_never_touches_an_existing_ledger_row(workspace):
    apply_all(workspace, events_of("main-line.jsonl")[:10])
    Operation.objects.filter(key="checkout-500:1:run_proof:e008:0").update(
        state="succeeded", attempts=1
    )
    repair_workspace(workspace)
    op = Operation.objects.get(key="checkout-500:1:run_proof:e008:0")
    assert (op.state, op.attempts) == ("succeeded", 1)


def test_deleted_projections_are_rebuilt_equal_field_by_field(workspace):
    for name in ("main-line.jsonl", "claims-and-revisions.jsonl", "intake-routes.jsonl"):
        apply_all(workspace, events_of(name))
    before = snapshot()
    Quest.objects.all().delete()
    report = repair_workspace(workspace)
    assert sorted(report.projections_created) == sorted(before[0])
    assert report.operations_created == []
    assert snapshot() == before


def test_a_tampered_projection_is_put_back(workspace):
    apply_all(workspace, events_of("main-line.jsonl"))
    Quest.objects.filter(quest_id="checkout-500").update(state="ready", claim="mallory")
    report = repair_workspace(workspace)
    assert report.projections_updated == ["checkout-500"]
    row = Quest.objects.get(quest_id="checkout-500")
    assert (row.state, row.claim) == ("closed", "")


def test_a_redelivered_event_is_not_journaled_or_audited_twice(workspace):
    events = events_of("main-line.jsonl")[:3]
    apply_all(workspace, events)
    audits = AuditEntry.objects.count()
    outcome = quest_apply(workspace, events[-1])
    assert outcome.applied.duplicate
    assert len(Journal(workspace.repository).history("checkout-500")) == 3
    assert AuditEntry.objects.count() == audits


def test_the_journal_holds_readable_files_for_git_users(workspace):
    apply_all(workspace, events_of("main-line.jsonl"))
    journal = Journal(workspace.repository)
    quest = json.loads(journal.read("checkout-500", "quest.json"))
    assert quest["state"] == "closed"
    assert journal.read("checkout-500", "proof/bundle.json") is not None


def test_what_repair_changes_is_audited(workspace):
    apply_all(workspace, events_of("main-line.jsonl"))
    Quest.objects.all().delete()
    repair_workspace(workspace)
    entry = AuditEntry.objects.filter(workspace=workspace).order_by("-sequence").first()
    assert (entry.action, entry.actor) == ("quest.repaired", "ephyra:repair")
    assert entry.payload == {"projections": ["checkout-500"], "operations": []}
    assert audit_verify(workspace) == (17, None)
    repair_workspace(workspace)
    assert AuditEntry.objects.filter(workspace=workspace).count() == 17  # nothing to say twice


def test_an_edited_or_removed_audit_entry_is_detected_where_it_happened(workspace):
    apply_all(workspace, events_of("main-line.jsonl")[:6])
    with audit_triggers_disabled():  # the database refuses both; a database owner would not
        AuditEntry.objects.filter(workspace=workspace, sequence=3).update(actor="mallory")
        assert audit_verify(workspace) == (
            2,
            "entry #3 was edited: its content does not match its hash",
        )
        AuditEntry.objects.filter(workspace=workspace, sequence=3).delete()
    assert audit_verify(workspace) == (2, "entry #3 was deleted: the log goes from #2 to #4")


def test_each_transition_is_logged_as_one_line_with_its_fields(workspace, caplog):
    story = Story("q1")
    with caplog.at_level("INFO", logger="ephyra.transitions"):
        quest_apply(workspace, story.signal())
        quest_apply(workspace, story("landed", commit="f" * 40))  # refused: not logged
    lines = [r for r in caplog.records if r.name == "ephyra.transitions"]
    assert [r.getMessage() for r in lines] == ["shop q1 q1-e1 signal_sensed: - -> sensed r1"]
    record = lines[0]
    assert (record.quest, record.to, record.revision) == ("q1", "sensed", 1)
