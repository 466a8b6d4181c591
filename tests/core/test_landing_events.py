"""A landing or a rollback the remote did not take parks the quest for a person, and resuming
picks the work up where a person expects it: C again for a landing, the rollback again."""

from __future__ import annotations

from ephyra.core.machine import decide
from ephyra.core.states import State as S
from tests.core.lifecycle_helpers import HOLDER, LANDED, accept, assert_refused, drive, types


def test_a_landing_the_remote_refused_parks_the_quest_and_resuming_asks_for_c_again():
    story, quest = drive(S.LANDING)
    event = story("landing_failed", reason="landing_refused", detail="pre-receive hook declined")
    decision = accept(quest, event)
    parked = decision.quest
    assert (parked.state, parked.park_reason, parked.resume_state) == (
        S.PARKED,
        "landing_refused",
        S.READY,
    )
    assert parked.approval_c is None  # the approval does not carry over to a second push
    [notify] = decision.effects
    assert notify.payload == {
        "reason": "landing_refused",
        "detail": "pre-receive hook declined",
        "files": [],
    }
    resumed = accept(parked, story("resumed", actor=HOLDER))
    assert resumed.state is S.READY
    assert [e.payload["checkpoint"] for e in resumed.effects] == ["C"]
    approved = accept(
        resumed.quest,
        story("checkpoint_decided", checkpoint="C", verdict="approve", actor=HOLDER),
    )
    assert (approved.state, types(approved)) == (S.LANDING, ["land"])


def test_only_a_landing_quest_can_fail_to_land():
    story, quest = drive(S.WATCHING)
    reason = "only a landing quest can fail to land; the quest is watching"
    assert_refused(decide(quest, story("landing_failed", reason="landing_refused")), quest, reason)


def test_a_conflicting_rollback_parks_the_quest_and_resuming_asks_for_the_rollback_again():
    story, quest = drive(S.ROLLED_BACK)
    event = story("rollback_failed", reason="rollback_conflict", files=["shop/cart.py"])
    decision = accept(quest, event)
    parked = decision.quest
    assert (parked.state, parked.park_reason, parked.resume_state) == (
        S.PARKED,
        "rollback_conflict",
        S.ROLLED_BACK,
    )
    assert [e.payload for e in decision.effects] == [
        {"reason": "rollback_conflict", "detail": "", "files": ["shop/cart.py"]}
    ]
    resumed = accept(parked, story("resumed", actor=HOLDER))
    assert resumed.state is S.ROLLED_BACK
    [rollback] = resumed.effects
    assert (str(rollback.type), rollback.payload["commit"]) == ("rollback", LANDED)
    confirmed = accept(resumed.quest, story("rollback_confirmed"))
    assert (confirmed.state, confirmed.revision) == (S.RESEARCHING, 2)


def test_only_a_quest_being_rolled_back_can_fail_to_roll_back():
    story, quest = drive(S.WATCHING)
    reason = "only a quest being rolled back can fail to roll back; the quest is watching"
    event = story("rollback_failed", reason="rollback_conflict")
    assert_refused(decide(quest, event), quest, reason)
