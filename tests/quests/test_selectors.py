"""The reads pages use: what they return, who sees what, and a query count that does not grow
with the number of rows."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, Group

from ledger.selectors import AuditFilters, audit_page
from quests import actions
from quests.actions import Seen
from quests.models import Workspace
from quests.roles import Role, workspace_roles
from quests.selectors import (
    InboxFilters,
    checkpoint_of,
    inbox_counts,
    inbox_page,
    quest_effects,
    quest_for,
    quest_timeline,
    readable_workspace_ids,
)
from tests.quests.conftest import drive, person, work


def at_checkpoints(workspace, n: int, prefix: str = "q") -> None:
    for i in range(n):
        drive(workspace, f"{prefix}{i}", ("hypothesised", "planned", "ready")[i % 3])


def test_the_inbox_lists_quests_waiting_for_a_person_with_their_checkpoint(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    drive(workspace, "a", "hypothesised")
    drive(workspace, "b", "ready")
    drive(workspace, "c", "researching")  # not waiting for anyone
    rows = list(inbox_page(ann, InboxFilters()))
    assert sorted((q.quest_id, checkpoint_of(q)) for q in rows) == [("a", "A"), ("b", "C")]
    only_c = inbox_page(ann, InboxFilters(checkpoint="C"))
    assert [q.quest_id for q in only_c] == ["b"]
    everything = inbox_page(ann, InboxFilters(waiting=False))
    assert len(everything) == 3


def test_mine_and_unclaimed_follow_the_claim(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    a = drive(workspace, "a", "hypothesised")
    drive(workspace, "b", "planned")
    actions.quest_claim(ann, a, seen=Seen(a.journal_head, a.revision), key="k")
    work(workspace)
    assert [q.quest_id for q in inbox_page(ann, InboxFilters(mine=True))] == ["a"]
    assert checkpoint_of(next(iter(inbox_page(ann, InboxFilters(mine=True))))) == "A"
    assert [q.quest_id for q in inbox_page(ann, InboxFilters(unclaimed=True))] == ["b"]
    counts = inbox_counts(ann)
    assert (counts["checkpoint"], counts["mine"], counts["handed_off"]) == (1, 1, 1)


def test_a_person_sees_only_the_workspaces_they_hold_a_role_in(workspace, other_workspace):
    drive(workspace, "mine", "hypothesised")
    drive(other_workspace, "theirs", "hypothesised")
    ann = person("ann", shop=[Role.STAFF])
    nobody = person("nobody")
    assert [q.quest_id for q in inbox_page(ann, InboxFilters())] == ["mine"]
    assert list(inbox_page(nobody, InboxFilters())) == []
    assert quest_for(ann, "shop", "mine") is not None
    assert quest_for(ann, "other", "theirs") is None  # not revealed to exist


def test_lists_read_exactly_the_workspaces_the_person_holds_a_role_in(workspace, other_workspace):
    Workspace.objects.create(slug="shop-eu", name="Shop EU", repository=workspace.repository)
    ann = person("ann", shop=[Role.REVIEWER])
    sam = person("sam", shop=[Role.STAFF], other=[Role.ADMIN, Role.STAFF])
    eve = person("eve", **{"shop-eu": [Role.REVIEWER]})  # not shop, whose slug begins hers
    odd = person("odd")
    odd.groups.add(Group.objects.create(name="shop:owner"), Group.objects.create(name="other"))
    gone = person("gone", shop=[Role.ADMIN])
    gone.is_active = False
    root = person("root")
    root.is_superuser = True
    ids = dict(Workspace.objects.values_list("slug", "id"))
    for user in (ann, sam, eve, odd, gone, root, AnonymousUser()):
        readable = readable_workspace_ids(user)
        assert set(readable) == set(workspace_roles(user)), user
        assert all(ids[slug] == pk for slug, pk in readable.items())
    assert set(readable_workspace_ids(sam)) == {"shop", "other"}
    assert set(readable_workspace_ids(eve)) == {"shop-eu"}
    assert set(readable_workspace_ids(root)) == {"shop", "other", "shop-eu"}
    assert readable_workspace_ids(odd) == readable_workspace_ids(gone) == {}


def test_the_inbox_costs_the_same_queries_for_three_quests_or_thirty(
    workspace, django_assert_num_queries
):
    ann = person("ann", shop=[Role.REVIEWER])
    at_checkpoints(workspace, 3, "few")
    with django_assert_num_queries(3):  # the person's roles, the count, the page
        assert len(list(inbox_page(ann, InboxFilters()))) == 3
    at_checkpoints(workspace, 27, "many")
    with django_assert_num_queries(3):
        page = inbox_page(ann, InboxFilters())
        assert [q.workspace.slug for q in page] == ["shop"] * 30
    with django_assert_num_queries(2):
        inbox_counts(ann)


def test_the_timeline_reads_the_journal_newest_first_with_refusals(
    workspace, django_assert_num_queries
):
    ann = person("ann", shop=[Role.REVIEWER])
    bob = person("bob", shop=[Role.REVIEWER])
    quest = drive(workspace, "q1", "hypothesised")
    both = Seen(quest.journal_head, quest.revision)
    actions.quest_claim(ann, quest, seen=both, key="a")
    actions.quest_claim(bob, quest, seen=both, key="b")
    work(workspace)
    quest = quest_for(ann, "shop", "q1")
    with django_assert_num_queries(1):  # the refused events; the rest is read from Git
        timeline = quest_timeline(quest)
    types = [(t.type, t.outcome, t.actor) for t in timeline]
    assert types[:2] == [("claimed", "refused", "bob"), ("claimed", "accepted", "ann")]
    assert [t.type for t in timeline][-1] == "signal_sensed"
    assert "moved on since it was shown" in timeline[0].reason
    assert timeline[1].commit == quest.journal_head


def test_a_quests_effects_come_with_their_ledger_state_in_one_query(
    workspace, django_assert_num_queries
):
    quest = drive(workspace, "q1", "hypothesised")
    with django_assert_num_queries(1):
        effects = quest_effects(quest)
    assert (effects[0].type, effects[0].state) == ("run_triage", "pending")
    assert len(effects) >= 3


def test_the_audit_list_pages_in_two_queries_and_filters_by_quest(
    workspace, django_assert_num_queries
):
    drive(workspace, "a", "hypothesised")
    drive(workspace, "b", "planned")
    with django_assert_num_queries(2):
        page = audit_page(["shop"], AuditFilters(quest="a"))
        objects = {entry.object for entry in page}
    assert objects == {"quest:a"}
    with django_assert_num_queries(2):
        assert len(list(audit_page(["shop"], AuditFilters()))) > 8
