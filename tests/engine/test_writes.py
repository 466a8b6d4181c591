"""How the engine and repair write: the transition's statements sent together, the audit chain
extended from the head this process remembers (and read again when that guess is stale), and
repair's COPY text for values that need escaping."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from ephyra import sql as statements
from ledger import audit
from ledger.audit import audit_append, audit_verify
from ledger.models import AuditEntry, Operation
from quests.engine import quest_apply
from quests.models import Quest
from quests.repair import repair_workspace
from tests.core.lifecycle_helpers import next_event
from tests.core.story import Story
from tests.engine.test_repair import _snapshot

pytestmark = pytest.mark.django_db

# Every character COPY's text format escapes, SQL quoting, COPY's NULL marker and non-ASCII.
AWKWARD = "tab\there\nnew line\r\\N back\\slash 'single' \"double\" ünï ✓ 100%s"


def _queries(workspace, event) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        outcome = quest_apply(workspace, event)
    assert outcome.applied.decision.accepted
    transaction_control = ("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT")
    return [
        q["sql"] for q in captured.captured_queries if not q["sql"].startswith(transaction_control)
    ]


def test_an_accepted_event_is_written_without_reading_first(workspace):
    story = Story("q1")
    quest_apply(workspace, story.signal())
    sql = _queries(workspace, story("triage_decided", route="auto_fix", risk="low"))
    if connection.vendor == "postgresql":
        # The lock, the projection, the ledger rows and the audit entry: one round trip.
        assert len(sql) == 1 and sql[0].startswith('SELECT 1 FROM "quests_workspace"')
    else:
        # SQLite is in-process: the statements run one by one, and none of them is a read
        # (not even of the audit chain's last entry).
        assert not any(s.startswith("SELECT") for s in sql)
    row = Quest.objects.get(quest_id="q1")
    assert (row.state, row.route) == ("triaged", "auto_fix")
    assert audit_verify(workspace) == (2, None)


def test_a_chain_head_another_process_moved_is_read_again(workspace):
    story = Story("q1")
    quest_apply(workspace, story.signal())
    remembered = audit._heads[workspace.pk]
    # Another process appends: this one's remembered head is now stale.
    audit_append(workspace, at=story.at, actor="bo", action="note", object="o", payload={})
    audit._heads[workspace.pk] = remembered
    quest_apply(workspace, story("triage_decided", route="auto_fix", risk="low"))
    assert list(AuditEntry.objects.order_by("sequence").values_list("sequence", "action")) == [
        (1, "quest.signal_sensed"),
        (2, "note"),
        (3, "quest.triage_decided"),
    ]
    assert audit_verify(workspace) == (3, None)


def test_a_process_that_remembers_nothing_chains_onto_the_stored_log(workspace):
    story = Story("q1")
    quest_apply(workspace, story.signal())
    audit._heads.clear()  # a restarted process
    quest_apply(workspace, story("triage_decided", route="auto_fix", risk="low"))
    assert audit_verify(workspace) == (2, None)


def test_a_head_remembered_from_a_rolled_back_transaction_is_not_chained_onto(workspace):
    story = Story("q1")
    quest_apply(workspace, story.signal())
    with pytest.raises(RuntimeError), transaction.atomic():
        quest_apply(workspace, story("triage_decided", route="auto_fix", risk="low"))
        raise RuntimeError("the caller's transaction fails after the engine wrote")
    assert AuditEntry.objects.count() == 1  # the entry went with the rollback
    # Git kept the transition; the next event catches the database up and audits on entry #1.
    quest_apply(workspace, story("research_started"))
    assert audit_verify(workspace) == (2, None)
    assert Quest.objects.get(quest_id="q1").state == "researching"
    assert not repair_workspace(workspace).changed


def test_values_that_copy_must_escape_are_rebuilt_exactly(workspace, monkeypatch):
    monkeypatch.setattr(statements, "COPY_FROM", 1)  # COPY on PostgreSQL even for a few rows
    story = Story("q1")
    signal = {"id": "s1", "fingerprint": f"fp {AWKWARD}", "severity": "error", "title": AWKWARD}
    quest = quest_apply(workspace, story("signal_sensed", signal=signal)).applied.decision.quest
    for _ in range(4):  # through the hypothesis, whose summary is in the quest's JSON
        quest = quest_apply(workspace, next_event(story, quest)).applied.decision.quest
    quest_apply(workspace, story("comment_added", body=AWKWARD))
    before = _snapshot(workspace)
    assert before[0]["q1"]["title"] == AWKWARD and before[1]
    Quest.objects.all().delete()
    Operation.objects.all().delete()
    report = repair_workspace(workspace)
    assert report.projections_created == ["q1"] and report.operations_created
    assert _snapshot(workspace) == before
    assert not repair_workspace(workspace).changed
