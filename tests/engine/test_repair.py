"""Repair in batches: many quests, both ways of inserting rows (COPY and INSERT on
PostgreSQL), and writers that move while repair reads."""

from __future__ import annotations

import pytest

from ephyra import sql as statements
from journal.store import Journal
from ledger.models import Operation
from quests import repair
from quests.engine import quest_apply
from quests.models import Quest, Workspace
from quests.repair import repair_workspace
from tests.core.lifecycle_helpers import next_event
from tests.core.story import Story

pytestmark = pytest.mark.django_db

QUESTS = 30


def _apply_main_line(workspace, quest_id: str, steps: int) -> None:
    _advance(workspace, {}, quest_id, steps)


def _advance(workspace, stories: dict, quest_id: str, steps: int) -> str:
    """Move a quest ``steps`` events along the main line through the engine; its head."""
    story, quest = stories.setdefault(quest_id, [Story(quest_id), None])
    for _ in range(steps):
        outcome = quest_apply(workspace, next_event(story, quest))
        assert outcome.applied.decision.accepted
        quest = stories[quest_id][1] = outcome.applied.decision.quest
    return str(outcome.applied.head)


def _snapshot(workspace):
    quests = {
        q["quest_id"]: {k: v for k, v in q.items() if k != "id"}
        for q in Quest.objects.filter(workspace=workspace).values()
    }
    operations = {
        o["key"]: {
            k: v for k, v in o.items() if k not in {"id", "created_at", "updated_at", "due_at"}
        }
        for o in Operation.objects.filter(workspace=workspace).values()
    }
    return quests, operations


@pytest.fixture
def many(workspace, monkeypatch):
    """QUESTS quests at different points of the main line; batches of 7 quests."""
    monkeypatch.setattr(repair, "BATCH", 7)
    for n in range(QUESTS):
        _apply_main_line(workspace, f"q{n:03d}", 2 + n % 7)  # up to proving
    return workspace


@pytest.mark.parametrize("copy_from", [1, 10**9], ids=["copy", "insert"])
def test_a_batched_repair_rebuilds_everything_and_leaves_existing_ledger_rows_alone(
    many, monkeypatch, copy_from
):
    monkeypatch.setattr(statements, "COPY_FROM", copy_from)
    keys = sorted(Operation.objects.values_list("key", flat=True))
    delivered = keys[::3]  # some effects already delivered: their rows must stay as they are
    Operation.objects.filter(key__in=delivered).update(state="succeeded", attempts=2)
    before = _snapshot(many)
    # One projection a commit behind, one edited by hand, the others gone with some of their
    # ledger rows (a row at head H vouches for every effect up to H, so only those are lost).
    behind = Quest.objects.get(quest_id="q001")
    parent = Journal(many.repository).repo[behind.journal_head].parent_ids[0]
    Quest.objects.filter(pk=behind.pk).update(journal_head=str(parent))
    Quest.objects.filter(quest_id="q002").update(state="abandoned", claim="mallory")
    Quest.objects.filter(workspace=many).exclude(quest_id__in=["q001", "q002"]).delete()
    lost = [k for k in keys[1::3] if not k.startswith(("q001:", "q002:"))]
    Operation.objects.filter(key__in=lost).delete()

    report = repair_workspace(many)
    assert len(report.projections_created) == QUESTS - 2
    assert report.projections_updated == ["q001", "q002"]
    assert sorted(report.operations_created) == lost
    after = _snapshot(many)
    assert after == before
    assert all(after[1][key]["state"] == "succeeded" for key in delivered)
    assert not repair_workspace(many).changed


def test_a_key_taken_between_the_lookup_and_the_write_is_left_as_it_is(many, monkeypatch):
    monkeypatch.setattr(statements, "COPY_FROM", 1)
    Operation.objects.filter(workspace=many).update(state="succeeded")
    Quest.objects.filter(workspace=many).delete()
    # As if every key had been inserted by someone else after repair looked them up.
    monkeypatch.setattr(repair, "_known_keys", lambda keys: set())
    repair_workspace(many)
    assert set(Operation.objects.values_list("state", flat=True)) == {"succeeded"}
    assert Quest.objects.filter(workspace=many).count() == QUESTS


def test_repair_never_moves_a_projection_back_past_what_the_engine_wrote_meanwhile(
    workspace, monkeypatch
):
    stories: dict = {}
    _advance(workspace, stories, "q1", 3)
    _advance(workspace, stories, "q2", 3)
    Quest.objects.filter(quest_id="q1").update(state="sensed")  # repair will want to fix it
    Quest.objects.filter(quest_id="q2").delete()
    read_head = str(Journal(workspace.repository).head("q1"))
    real_write = repair._write
    moved = []

    def engine_first(*args, **kwargs):
        if not moved:  # the engine lands an event after repair read Git, before it writes
            moved.append(_advance(workspace, stories, "q1", 1))
        return real_write(*args, **kwargs)

    monkeypatch.setattr(repair, "_write", engine_first)
    report = repair_workspace(workspace)
    row = Quest.objects.get(quest_id="q1")
    assert row.journal_head == moved[0] != read_head  # not the head repair had read
    assert report.projections_updated == [] and report.projections_created == ["q2"]
    assert not repair_workspace(workspace).changed


def test_a_workspace_with_nothing_to_repair_writes_nothing(many, django_assert_max_num_queries):
    with django_assert_max_num_queries(1):  # the projection rows, read once
        report = repair_workspace(many)
    assert report.quests == QUESTS and not report.changed


def test_repair_reads_only_the_commits_after_a_rows_head(workspace, monkeypatch):
    _apply_main_line(workspace, "q1", 8)
    head = Quest.objects.get(quest_id="q1").journal_head
    journal = Journal(workspace.repository)
    parent = journal.repo[head].parent_ids[0]
    read: list = []
    real = Journal.since

    def since(self, at, stop=None):
        result = real(self, at, stop)
        read.append(
            (str(at), None if stop is None else str(stop), [str(c) for c, _ in result.effects])
        )
        return result

    monkeypatch.setattr(Journal, "since", since)
    repair_workspace(workspace)
    assert read == [(head, head, [])]  # the row is at the head: only quest.json is read
    read.clear()
    Quest.objects.filter(quest_id="q1").update(journal_head=str(parent))
    repair_workspace(workspace)
    [(at, stop, with_effects)] = read
    assert (at, stop) == (head, str(parent)) and set(with_effects) <= {head}


def test_workspaces_do_not_see_each_others_quests(workspace, tmp_path):
    other_path = tmp_path / "other.git"
    Journal.init(other_path)
    other = Workspace.objects.create(slug="other", name="Other", repository=str(other_path))
    _apply_main_line(workspace, "q1", 3)
    _apply_main_line(other, "z1", 2)
    Quest.objects.all().delete()
    assert repair_workspace(workspace).projections_created == ["q1"]
    assert repair_workspace(other).projections_created == ["z1"]
