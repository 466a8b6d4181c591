"""Group commits: events of distinct quests journaled one by one, then projected, put in the
ledger and audited in one database transaction (``quest_apply_all``), with the same result as
applying them one at a time."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ephyra.core.machine import decide
from journal.anchor import anchor_history
from journal.apply import replay_journal
from journal.store import Journal
from ledger import audit
from ledger.audit import audit_append, audit_verify
from ledger.models import AuditEntry, Operation
from quests.engine import quest_apply_all
from quests.models import Quest
from quests.repair import repair_workspace
from quests.workspaces import workspace_policy
from tests.core.lifecycle_helpers import next_event
from tests.core.story import Story

pytestmark = pytest.mark.django_db


class Crash(Exception):
    pass


def _crash() -> None:
    raise Crash("the process died between the Git writes and the database transaction")


def main_lines(workspace, quests: int, steps: int) -> list[list]:
    """Each quest's first ``steps`` main-line events, decided in the pure core."""
    policy = workspace_policy(workspace)
    lines = []
    for n in range(quests):
        story, quest, events = Story(f"q{n}"), None, []
        for _ in range(steps):
            event = next_event(story, quest)
            quest = decide(quest, event, policy).quest
            events.append(event)
        lines.append(events)
    return lines


def later(line: list, type_: str, **fields):
    """An event for the quest of ``line``, after the line's events, with an id of its own."""
    story = Story(line[0].quest, start=line[-1].at)
    story.n = len(line)
    return story(type_, **fields)


def rounds(lines: list[list]) -> list[list]:
    """Round-robin: every quest's first event, then every quest's second, ...: groups of
    distinct quests, each quest's events in order."""
    return [list(group) for group in zip(*lines, strict=True)]


def snapshot(workspace) -> tuple[dict, dict, list]:
    skip = {"id", "workspace_id", "created_at", "updated_at", "due_at"}
    quests = {
        q["quest_id"]: {k: v for k, v in q.items() if k not in {"id", "workspace_id"}}
        for q in Quest.objects.filter(workspace=workspace).values()
    }
    operations = {
        o["key"]: {k: v for k, v in o.items() if k not in skip}
        for o in Operation.objects.filter(workspace=workspace).values()
    }
    entries = list(
        AuditEntry.objects.filter(workspace=workspace)
        .order_by("sequence")
        .values_list("action", "object", "payload")
    )
    return quests, operations, entries


def test_a_group_writes_what_one_event_at_a_time_writes(workspace):
    """What a group wrote is what repair rebuilds from the journals (the one-at-a-time
    engine's own yardstick, tests/engine/test_repair.py), and each journal is the fold of its
    quest's events."""
    lines = main_lines(workspace, quests=4, steps=8)  # through checkpoints A and B, to a patch
    for group in rounds(lines):
        outcomes = quest_apply_all(workspace, group)
        assert [o.applied.decision.accepted for o in outcomes] == [True] * len(group)
    written = snapshot(workspace)
    assert len(written[0]) == 4 and len(written[1]) == 4 * 7 and len(written[2]) == 32
    assert [payload["event"] for _, _, payload in written[2]] == [
        event.id for group in rounds(lines) for event in group
    ]
    Quest.objects.all().delete()
    Operation.objects.all().delete()
    repair_workspace(workspace)
    assert snapshot(workspace)[:2] == written[:2]
    journal = Journal(workspace.repository)
    for line in lines:
        assert replay_journal(journal, line[0].quest, workspace_policy(workspace)).matches
    assert audit_verify(workspace)[1] is None


def test_a_group_is_one_round_trip_to_postgresql_and_one_commit(workspace):
    lines = main_lines(workspace, quests=5, steps=2)
    quest_apply_all(workspace, [line[0] for line in lines])
    with CaptureQueriesContext(connection) as captured:
        outcomes = quest_apply_all(workspace, [line[1] for line in lines])
    assert sum(o.operations for o in outcomes) == 5  # each triage asks for research
    sql = [q["sql"] for q in captured.captured_queries]
    control = ("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT")
    work = [s for s in sql if not s.startswith(control)]
    if connection.vendor == "postgresql":
        assert len(work) == 1  # the lock, 5 projections, 5 ledger rows, 5 audit entries
    else:
        assert not any(s.startswith("SELECT") for s in work)  # SQLite: in-process, no reads
    assert audit_verify(workspace) == (10, None)


def test_two_events_of_one_quest_are_not_a_group_and_nothing_is_written(workspace):
    story = Story("q1")
    first, second = story.signal(), story("triage_decided", route="auto_fix", risk="low")
    with pytest.raises(ValueError, match="one event per quest"):
        quest_apply_all(workspace, [first, second])
    assert Journal(workspace.repository).head("q1") is None
    assert not Quest.objects.exists() and not AuditEntry.objects.exists()


def test_a_redelivery_and_a_refusal_in_a_group_keep_the_rest_and_the_audit_order(workspace):
    lines = main_lines(workspace, quests=3, steps=3)
    quest_apply_all(workspace, [line[0] for line in lines])
    q1_signal_again = lines[1][0]  # the head's own event: answered from the journal
    refused = later(lines[2][:1], "watch_clean", summary="quiet")  # q2 is not watching
    outcomes = quest_apply_all(workspace, [lines[0][1], q1_signal_again, refused])
    assert [o.applied.decision.outcome for o in outcomes] == ["accepted", "accepted", "refused"]
    assert outcomes[1].applied.duplicate and outcomes[1].operations == 0
    assert audit_verify(workspace) == (4, None)  # three signals and q0's triage, nothing more
    assert list(Quest.objects.order_by("quest_id").values_list("state", flat=True)) == [
        "triaged",
        "sensed",
        "sensed",
    ]


def test_a_crash_after_a_groups_git_writes_is_caught_up_and_nothing_is_decided_twice(
    workspace,
):
    lines = main_lines(workspace, quests=3, steps=2)
    quest_apply_all(workspace, [line[0] for line in lines])
    usage = [later(line[:1], "usage_recorded", source="agent", tokens=7) for line in lines]
    before = snapshot(workspace)
    with pytest.raises(Crash):
        quest_apply_all(workspace, usage, after_journal=_crash)
    assert snapshot(workspace) == before  # the database took nothing
    # Offered again (the inbound rows are still pending), each event is its quest's journal
    # head: followed from Git, never counted twice (a usage event is always accepted).
    outcomes = quest_apply_all(workspace, usage)
    assert all(o.applied.duplicate for o in outcomes)
    journal = Journal(workspace.repository)
    for n in range(3):
        row = Quest.objects.get(quest_id=f"q{n}")
        assert row.data["usage"]["tokens"] == 7
        assert row.journal_head == str(journal.head(f"q{n}"))
    assert audit_verify(workspace) == (6, None)
    assert not repair_workspace(workspace).changed


def test_a_stale_chain_head_in_a_group_re_chains_every_entry_after_it(workspace):
    lines = main_lines(workspace, quests=3, steps=2)
    quest_apply_all(workspace, [line[0] for line in lines])
    remembered = audit._heads[workspace.pk]
    at = lines[0][0].at
    audit_append(workspace, at=at, actor="bo", action="note", object="o", payload={})
    audit._heads[workspace.pk] = remembered  # another process appended meanwhile
    quest_apply_all(workspace, [line[1] for line in lines])
    actions = AuditEntry.objects.order_by("sequence").values_list("action", flat=True)
    assert list(actions)[3:] == ["note", *["quest.triage_decided"] * 3]
    assert audit_verify(workspace) == (7, None)


def test_checkpoint_decisions_committed_in_one_group_get_one_anchor(
    workspace, django_capture_on_commit_callbacks
):
    lines = main_lines(workspace, quests=2, steps=5)  # the fifth event decides checkpoint A
    for group in rounds(lines)[:4]:
        quest_apply_all(workspace, group)
    with django_capture_on_commit_callbacks(execute=True):
        quest_apply_all(workspace, [line[4] for line in lines])
    decisions = AuditEntry.objects.filter(action="quest.checkpoint_decided")
    assert sorted(decisions.values_list("sequence", flat=True)) == [9, 10]
    assert [a.sequence for a in anchor_history(workspace.repository, "shop")] == [10]
