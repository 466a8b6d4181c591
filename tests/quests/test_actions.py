"""People act on quests through the action layer: permission, staleness, idempotency, the
machine's reasons, and the worker as the one writer."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from ledger.models import InboundEvent
from quests import actions
from quests.actions import Invalid, Refused, Seen, Stale
from quests.models import Quest
from quests.roles import Role
from quests.workspaces import workspace_journal
from tests.quests.conftest import drive, person, work


def seen(quest: Quest) -> Seen:
    return Seen(quest.journal_head, quest.revision)


def fresh(quest: Quest) -> Quest:
    return Quest.objects.get(pk=quest.pk)


def test_a_reviewer_claims_a_review_and_the_worker_applies_it_as_their_account(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    quest = drive(workspace, "q1", "hypothesised")
    submitted = actions.quest_claim(ann, quest, seen=seen(quest), key="k1")
    assert submitted.state == "pending"
    work(workspace)
    assert submitted.wait(0).state == "applied"
    quest = fresh(quest)
    assert (quest.state, quest.claim) == ("handed_off", "ann")
    head = workspace_journal(workspace).entry(workspace_journal(workspace).head("q1"))
    assert (head.event.type, head.event.actor) == ("claimed", "ann")


def test_a_double_click_applies_once(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    quest = drive(workspace, "q1", "hypothesised")
    first = actions.quest_claim(ann, quest, seen=seen(quest), key="form-token-1")
    again = actions.quest_claim(ann, quest, seen=seen(quest), key="form-token-1")
    assert again.row.pk == first.row.pk
    work(workspace)
    # After it applied, the same form once more is answered with the first outcome.
    third = actions.quest_claim(ann, fresh(quest), seen=seen(quest), key="form-token-1")
    assert (third.row.pk, third.state) == (first.row.pk, "applied")
    assert InboundEvent.objects.filter(workspace=workspace).count() == 1
    assert len(workspace_journal(workspace).history("q1")) == 5  # 4 to A, 1 claim


def test_a_key_used_for_another_action_is_refused(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    quest = drive(workspace, "q1", "hypothesised")
    actions.checkpoint_decide(
        ann, quest, checkpoint="A", verdict="approve", seen=seen(quest), key="k"
    )
    with pytest.raises(Invalid, match="idempotency key was used for a different action"):
        actions.checkpoint_decide(
            ann, quest, checkpoint="A", verdict="reject", comment="no", seen=seen(quest), key="k"
        )


def test_an_action_on_a_quest_that_moved_is_refused_before_it_is_queued(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    quest = drive(workspace, "q1", "hypothesised")
    old = Seen("0" * 40, 1)
    with pytest.raises(Stale, match=r"moved on since you saw it .* now hypothesised"):
        actions.quest_claim(ann, quest, seen=old, key="k1")
    assert not InboundEvent.objects.exists()


def test_two_people_acting_on_what_they_both_saw_one_wins_and_the_other_is_told(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    bob = person("bob", shop=[Role.REVIEWER])
    quest = drive(workspace, "q1", "hypothesised")
    both_saw = seen(quest)
    approve = actions.checkpoint_decide(
        ann, quest, checkpoint="A", verdict="approve", seen=both_saw, key="a"
    )
    claim = actions.quest_claim(bob, quest, seen=both_saw, key="b")
    work(workspace)
    assert approve.wait(0).state == "applied"
    assert claim.wait(0).state == "refused"
    assert "moved on since it was shown" in claim.reason
    assert fresh(quest).state == "reproducing"  # bob's claim never touched the newer state


def test_the_machine_refuses_with_its_reason_and_nothing_is_queued(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    quest = drive(workspace, "q1", "researching")
    with pytest.raises(Refused, match="a review can be claimed only at a checkpoint"):
        actions.quest_claim(ann, quest, seen=seen(quest), key="k1")
    assert not InboundEvent.objects.exists()


def test_while_a_review_is_held_others_may_comment_but_not_decide(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    bob = person("bob", shop=[Role.REVIEWER])
    quest = drive(workspace, "q1", "planned")
    actions.quest_claim(ann, quest, seen=seen(quest), key="c")
    work(workspace)
    quest = fresh(quest)
    with pytest.raises(Refused, match="the review is claimed by ann; only they can act now"):
        actions.checkpoint_decide(
            bob, quest, checkpoint="B", verdict="approve", seen=seen(quest), key="d"
        )
    comment = actions.quest_comment(bob, quest, body="looks right to me", key="m")
    work(workspace)
    assert comment.wait(0).state == "applied"
    assert fresh(quest).data["comments"] == 1


def test_who_may_act_is_checked_before_anything_is_queued(workspace, other_workspace):
    staff = person("sam", shop=[Role.STAFF])
    outsider = person("olga", other=[Role.ADMIN])
    reviewer = person("rita", shop=[Role.REVIEWER])
    quest = drive(workspace, "q1", "hypothesised")
    with pytest.raises(PermissionDenied):
        actions.quest_claim(staff, quest, seen=seen(quest), key="k")
    with pytest.raises(PermissionDenied):
        actions.quest_claim(outsider, quest, seen=seen(quest), key="k")
    with pytest.raises(PermissionDenied, match="needs the role admin"):
        actions.quest_kill(reviewer, quest, reason="noise", seen=seen(quest), key="k")
    assert not InboundEvent.objects.exists()


def test_reject_and_revise_need_a_comment_and_comments_have_a_cap(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    quest = drive(workspace, "q1", "hypothesised")
    with pytest.raises(Invalid, match="a comment is required"):
        actions.checkpoint_decide(
            ann, quest, checkpoint="A", verdict="reject", comment="  ", seen=seen(quest), key="k"
        )
    with pytest.raises(Invalid, match="at most 4000"):
        actions.quest_comment(ann, quest, body="x" * 4001, key="k2")
    assert not InboundEvent.objects.exists()


def test_an_admin_kills_a_quest_and_the_audit_names_the_account(workspace):
    boss = person("boss", shop=[Role.ADMIN])
    quest = drive(workspace, "q1", "researching")
    actions.quest_kill(boss, quest, reason="duplicate of q0", seen=seen(quest), key="k")
    work(workspace)
    quest = fresh(quest)
    assert (quest.state, quest.park_reason) == ("abandoned", "duplicate of q0")
    entry = workspace.audit_entries.order_by("-sequence").first()
    assert (entry.action, entry.actor) == ("quest.killed", "boss")
