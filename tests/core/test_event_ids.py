"""A quest takes each event id once (issue 13, defect 3): in ``fold``, as in the journal.

An event id is part of every effect key its event asks for, so two different events under one
id would share keys, and a repeated receipt would count twice. Spec: docs/lifecycle.md, "Event
ids"; the journal's side is tests/journal/test_event_ids.py.
"""

from __future__ import annotations

from ephyra.core.events import BaseEvent, event_to_dict, parse_event
from ephyra.core.machine import fold
from ephyra.core.quest import Quest
from tests.core.lifecycle_helpers import NEW_HEAD, next_event
from tests.core.story import Story


def as_id(event: BaseEvent, event_id: str, **changes) -> BaseEvent:
    """``event`` under another id (and with ``changes``): how a sender reuses an id."""
    return parse_event(event_to_dict(event) | {"id": event_id, **changes})


def main_line(story: Story, steps: int) -> tuple[list[BaseEvent], Quest]:
    events: list[BaseEvent] = []
    quest = None
    for _ in range(steps):
        events.append(next_event(story, quest))
        quest = fold(events).quest
    return events, quest


def test_an_event_whose_id_the_quest_already_used_is_refused_naming_the_earlier_one():
    story = Story("q1")
    events, _ = main_line(story, 3)  # researching
    comment = story("comment_added", body="first")
    usage = as_id(story("usage_recorded", source="runner", tokens=7), comment.id)
    result = fold([*events, comment, usage])
    refused = result.decisions[-1]
    assert refused.outcome == "refused"
    assert refused.reason == (
        f"the event id {comment.id} is already used by comment_added (position 4): "
        "a quest takes each event id once"
    )
    assert result.first_invalid == refused
    assert result.quest.usage.tokens == 0
    assert result.quest == result.decisions[-2].quest


def test_a_usage_receipt_sent_again_under_its_id_with_other_amounts_counts_once():
    story = Story("q1")
    events, _ = main_line(story, 2)
    receipt = story("usage_recorded", source="runner", tokens=100, cost_micros=5)
    changed = as_id(receipt, receipt.id, tokens=900)
    result = fold([*events, receipt, changed])
    assert [d.outcome for d in result.decisions[-2:]] == ["accepted", "refused"]
    assert result.quest.usage.tokens == 100
    assert result.quest.usage.receipts == 1


def test_two_patches_under_one_id_cannot_share_a_run_proof_key():
    # The defect as found: two different heads, one run_proof key.
    story = Story("q1")
    events, _ = main_line(story, 8)  # … patch_recorded: proving
    patch = events[-1]
    failed = story("proof_failed", reason="red")
    again = as_id(patch, patch.id, head=NEW_HEAD)
    result = fold([*events, failed, again])
    assert result.decisions[-2].outcome == "accepted"  # back to patching, attempt 2
    assert result.decisions[-1].outcome == "refused"
    assert f"already used by patch_recorded (position {len(events)})" in result.decisions[-1].reason
    keys = [e.key for d in result.decisions for e in d.effects]
    assert len(keys) == len(set(keys))
    assert result.quest.patch_head == patch.head


def test_an_exact_copy_of_an_event_already_taken_is_absorbed_and_changes_nothing():
    story = Story("q1")
    events, _ = main_line(story, 3)
    receipt = story("usage_recorded", source="runner", tokens=100)
    result = fold([*events, receipt, receipt, events[1]])
    assert [d.outcome for d in result.decisions[-3:]] == ["accepted", "absorbed", "absorbed"]
    assert result.decisions[-2].reason == (
        f"event {receipt.id} (usage_recorded) was already taken (position 4): "
        "a redelivery changes nothing"
    )
    assert result.decisions[-1].reason.startswith(f"event {events[1].id} (triage_decided) was")
    assert result.decisions[-1].effects == ()
    assert result.first_invalid is None
    assert result.quest.usage.tokens == 100


def test_an_exact_copy_of_the_creation_is_absorbed_not_refused_as_an_existing_quest():
    sensed = Story("q1").signal()
    result = fold([sensed, sensed])
    assert [d.outcome for d in result.decisions] == ["accepted", "absorbed"]
    assert result.first_invalid is None


def test_an_id_is_checked_per_quest():
    one, other = Story("q1"), Story("q2")
    first = one.signal()
    second = as_id(other.signal(sid="s2", fingerprint="fp2"), first.id, quest="q2")
    result = fold([first, second])
    assert [d.outcome for d in result.decisions] == ["accepted", "accepted"]
    assert set(result.quests) == {"q1", "q2"}


def test_a_refused_event_does_not_use_up_its_id():
    # Only accepted events are journaled, so only they use an id; the journal agrees.
    story = Story("q1")
    events, _ = main_line(story, 1)  # sensed
    too_early = story("hypothesis_written", summary="not yet")
    triage = as_id(next_event(story, fold(events).quest), too_early.id)
    result = fold([*events, too_early, triage])
    assert [d.outcome for d in result.decisions[-2:]] == ["refused", "accepted"]
