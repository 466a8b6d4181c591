"""The audit trail through Django's test client: who may read it, the entries with their quest,
commit and hash, the filters, and the "Verify chain" button before and after tampering."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from journal.anchor import anchor_history
from ledger.models import AuditEntry
from quests.engine import quest_apply
from quests.roles import Role
from tests.audit_tampering import audit_triggers_disabled
from tests.core.story import Story
from tests.quests.conftest import drive, person

pytestmark = pytest.mark.django_db

AUDIT = reverse("inbox:audit")
VERIFY = reverse("inbox:audit_verify")


@pytest.fixture
def people(workspace, other_workspace):
    return {
        "reviewer": person("rita", shop=[Role.REVIEWER]),
        "admin": person("ada", shop=[Role.ADMIN]),
        "staff": person("sam", shop=[Role.STAFF]),
        "outsider": person("olga", other=[Role.STAFF]),
    }


@pytest.fixture
def anchored(workspace, django_capture_on_commit_callbacks):
    """A quest driven to checkpoint C the real way: each checkpoint decision is anchored in
    Git once its transaction commits (here: when the captured callbacks run)."""
    with django_capture_on_commit_callbacks(execute=True):
        drive(workspace, "q1", "ready")
    return workspace


def as_(client, user):
    client.force_login(user)
    return client


def test_the_audit_trail_answers_each_person_with_the_exact_status(
    client, anchored, other_workspace, people
):
    drive(other_workspace, "theirs", "hypothesised")
    answer = client.get(AUDIT)
    assert (answer.status_code, answer["Location"]) == (
        302,
        f"{reverse('inbox:login')}?next=/audit/",
    )
    assert client.post(VERIFY, {"workspace": "shop"}).status_code == 302

    rita = as_(client, people["reviewer"])
    refused = rita.get(AUDIT)
    assert refused.status_code == 403
    assert "The audit trail is for the admins and staff of a workspace." in refused.content.decode()
    assert rita.post(VERIFY, {"workspace": "shop"}).status_code == 403
    for who in ("admin", "staff"):
        page = as_(client, people[who]).get(AUDIT)
        assert page.status_code == 200
        html = page.content.decode()
        assert reverse("inbox:quest", args=["shop", "q1"]) in html
        assert "theirs" not in html
        assert client.post(VERIFY, {"workspace": "shop"}).status_code == 303

    olga = as_(client, people["outsider"])
    html = olga.get(AUDIT).content.decode()
    assert reverse("inbox:quest", args=["other", "theirs"]) in html
    assert reverse("inbox:quest", args=["shop", "q1"]) not in html
    assert olga.post(VERIFY, {"workspace": "shop"}).status_code == 404  # another workspace
    assert olga.get(AUDIT + "?workspace=shop").status_code == 400  # not one of hers to pick


def test_each_entry_links_to_its_quest_and_shows_its_commit_and_hash(client, anchored, people):
    html = as_(client, people["staff"]).get(AUDIT).content.decode()
    decision = AuditEntry.objects.get(
        workspace=anchored, action="quest.checkpoint_decided", payload__to="patching"
    )
    head, digest = decision.payload["journal_head"], decision.entry_hash
    row = html[html.index(f'<tr id="entry-shop-{decision.sequence}">') :]
    row = row[: row.index("</tr>")]
    assert "quest.checkpoint_decided" in row and "planned → patching · revision 1" in row
    assert f'<a href="{reverse("inbox:quest", args=["shop", "q1"])}">quest q1</a>' in row
    assert f'<span title="{head}">{head[:12]}</span>' in row
    assert f'<span title="{digest}">{digest.removeprefix("sha256:")[:12]}</span>' in row


def test_the_trail_filters_by_actor_action_quest_and_days(client, anchored, people):
    late = Story("late", start=datetime(2026, 2, 1, 9, 0, tzinfo=UTC))
    quest_apply(anchored, late.signal())
    staff = as_(client, people["staff"])

    def sequences(query: str) -> list[int]:
        html = staff.get(AUDIT + query).content.decode()
        return [int(s) for s in _row_ids(html)]

    everything = list(
        AuditEntry.objects.filter(workspace=anchored)
        .order_by("-sequence")
        .values_list("sequence", flat=True)
    )
    assert sequences("") == everything
    decisions = AuditEntry.objects.filter(action="quest.checkpoint_decided")
    assert sequences("?action=quest.checkpoint_decided") == sorted(
        (e.sequence for e in decisions), reverse=True
    )
    assert sequences("?quest=late") == [everything[0]]
    assert sequences("?since=2026-02-01") == [everything[0]]
    assert sequences("?until=2026-01-05") == everything[1:]  # the day itself is included
    assert sequences("?actor=nobody") == []
    bad = staff.get(AUDIT + "?since=2026-02-01&until=2026-01-01")
    assert bad.status_code == 400
    assert "Not filtered by until: the range ends before it starts" in bad.content.decode()


def _row_ids(html: str) -> list[str]:
    return re.findall(r'<tr id="entry-shop-(\d+)">', html)


def test_verify_reports_a_chain_anchored_in_git(client, anchored, people):
    entries = AuditEntry.objects.filter(workspace=anchored).count()
    anchor = anchor_history(anchored.repository, "shop")[-1].sequence
    answer = as_(client, people["staff"]).post(VERIFY, {"workspace": "shop"}, follow=True)
    assert answer.redirect_chain == [(AUDIT, 303)]
    assert f"shop: verified {entries} entries, anchored at #{anchor} in Git." in (
        answer.content.decode()
    )


def test_verify_says_when_nothing_is_anchored_yet(client, workspace, people):
    drive(workspace, "q1", "hypothesised")  # no checkpoint decided: nothing anchored
    answer = as_(client, people["admin"]).post(
        VERIFY, {"workspace": "shop", "back": "actor=ephyra"}, HTTP_HX_REQUEST="true"
    )
    assert answer["X-Ephyra-Outcome"] == "verified"
    live = answer.content.decode()
    assert live.startswith('<div id="audit-live">')
    assert "shop: verified 4 entries, not anchored yet." in live


def test_verify_names_the_first_broken_entry_after_tampering(client, anchored, people):
    with audit_triggers_disabled():
        AuditEntry.objects.filter(workspace=anchored, sequence=3).update(actor="mallory")
    answer = as_(client, people["staff"]).post(VERIFY, {"workspace": "shop"})
    assert answer["X-Ephyra-Outcome"] == "broken"
    html = client.get(answer["Location"]).content.decode()
    assert (
        "shop: the chain is broken at entry #3: entry #3 was edited: its content does not "
        "match its hash (the 2 entries before it verify)."
    ) in html


def test_the_trail_costs_the_same_queries_for_few_entries_or_many(
    client, workspace, people, django_assert_num_queries
):
    drive(workspace, "q0", "hypothesised")
    staff = as_(client, people["staff"])
    with django_assert_num_queries(5):  # session, account, roles, the page's count, its rows
        few = staff.get(AUDIT)
    for i in range(1, 7):
        drive(workspace, f"q{i}", "ready")
    with django_assert_num_queries(5):
        many = staff.get(AUDIT)
    assert len(_row_ids(few.content.decode())) == 4
    assert len(_row_ids(many.content.decode())) == 50  # a full page of the 58
