"""A failed proof that carries its bundle is bound to the revision, base and head it was made
for: the late failure of an earlier revision never decides the current one. A failure without
a bundle reads, and is journaled, exactly as before."""

from __future__ import annotations

from ephyra.core.events import event_to_dict, parse_event
from ephyra.core.machine import decide
from ephyra.core.states import State
from tests.core.lifecycle_helpers import NEW_HEAD, accept, assert_refused, drive, proof_with
from tests.core.story import bundle_for

S = State


def test_a_failed_proof_bound_to_the_quest_as_it_is_sends_it_back_to_patching():
    story, quest = drive(S.PROVING)
    failed = story("proof_failed", reason="check 'tests' failed", **bundle_for(quest))
    assert accept(quest, failed).state is S.PATCHING


def test_a_failed_proof_of_another_head_is_refused():
    story, quest = drive(S.PROVING)
    stale = story("proof_failed", reason="late", **proof_with(quest, {"head": NEW_HEAD}))
    reason = f"proof bundle head is {NEW_HEAD!r} but the quest's is {quest.patch_head!r}"
    assert_refused(decide(quest, stale), quest, reason)


def test_a_failed_proof_of_an_earlier_revision_is_refused():
    story, quest = drive(S.PROVING)
    stale = story("proof_failed", reason="late", **proof_with(quest, {"revision": 7}))
    assert_refused(
        decide(quest, stale),
        quest,
        f"proof bundle revision is 7 but the quest's is {quest.revision}",
    )


def test_a_failed_proof_whose_digest_is_not_its_bundles_is_refused():
    story, quest = drive(S.PROVING)
    fields = bundle_for(quest) | {"digest": "sha256:" + "0" * 64}
    wrong = story("proof_failed", reason="x", **fields)
    reason = "proof digest does not match the canonical SHA-256 of the bundle"
    assert_refused(decide(quest, wrong), quest, reason)


def test_a_failed_proof_without_a_bundle_keeps_its_json_and_is_taken():
    story, quest = drive(S.PROVING)
    plain = story("proof_failed", reason="the suite failed")
    data = event_to_dict(plain)
    assert "bundle" not in data and "digest" not in data
    assert event_to_dict(parse_event(data)) == data
    assert accept(quest, plain).state is S.PATCHING
