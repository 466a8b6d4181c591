"""The events of the steps that work on code: a patch that could not be written parks the
quest for a person, and evidence is bounded JSON the machine carries but never reads."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ephyra.core.events import EVIDENCE_LIMIT, parse_event
from ephyra.core.machine import decide
from ephyra.core.states import State as S
from tests.core.lifecycle_helpers import drive


def test_a_patch_that_could_not_be_written_parks_the_quest_with_the_reason_and_files():
    story, quest = drive(S.PATCHING)
    event = story("patch_failed", reason="revert_conflict", files=["shop/cart.py"])
    decision = decide(quest, event)
    assert decision.accepted
    assert (str(decision.state), decision.quest.park_reason) == ("parked", "revert_conflict")
    assert str(decision.quest.resume_state) == "patching"
    [notify] = decision.effects
    assert notify.payload == {"reason": "revert_conflict", "detail": "", "files": ["shop/cart.py"]}
    resumed = decide(decision.quest, story("resumed"))
    assert str(resumed.state) == "patching"
    assert [str(e.type) for e in resumed.effects] == ["start_agent"]


def test_only_a_patching_quest_can_fail_to_patch():
    story, quest = drive(S.PROVING)
    decision = decide(quest, story("patch_failed", reason="revert_conflict"))
    assert decision.reason == (
        "only a quest that is patching can fail to patch; the quest is proving"
    )


def test_evidence_is_carried_as_given_and_bounded():
    story, quest = drive(S.RESEARCHING)
    evidence = {"frames": [{"file": "shop/cart.py", "line": 12}], "suspects": ["a" * 40]}
    event = story("hypothesis_written", summary="the cart", evidence=evidence)
    assert decide(quest, event).accepted
    assert event.evidence == evidence
    with pytest.raises(ValidationError, match=f"at most {EVIDENCE_LIMIT}"):
        parse_event(
            {
                **event.model_dump(mode="json"),
                "evidence": {"blob": "x" * (EVIDENCE_LIMIT + 1)},
            }
        )
