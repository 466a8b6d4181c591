"""The inbox's counts stop at a thousand: exact below, "1,000+" past it, on the tabs and the
pager alike, and the pages past the thousandth quest stay reachable."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from ephyra.core.states import State
from ephyra.sql import insert_rows
from quests.models import Quest
from quests.projection import projection_of
from quests.roles import Role
from quests.selectors import COUNT_CAP, PAGE_SIZE, InboxFilters, inbox_counts, inbox_page
from tests.core import lifecycle_helpers as lifecycle
from tests.core.story import T0
from tests.quests.conftest import person

pytestmark = pytest.mark.django_db


def add_quests(workspace, n: int, state: State, *, claim: str = "", start: int = 0) -> None:
    """``n`` projection rows in ``state``, written directly (test set-up: only counts and
    pages are read here, never their journals), one minute apart."""
    _, value = lifecycle.drive(state, "template", checks=lifecycle.passed("tests"))
    rows = []
    for i in range(start, start + n):
        at = (T0 + timedelta(minutes=i)).isoformat()
        data = dict(value.to_dict(), id=f"{state}-{i}", updated_at=at, claim=claim or None)
        rows.append({"quest_id": f"{state}-{i}", **projection_of(data, "0" * 40)})
    insert_rows(Quest, workspace, rows)


def test_counts_are_exact_up_to_the_cap(workspace, other_workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    add_quests(workspace, COUNT_CAP - 1, State.HYPOTHESISED)
    add_quests(workspace, 2, State.HANDED_OFF, claim="ann")
    add_quests(workspace, 1, State.HANDED_OFF, claim="bob", start=2)
    add_quests(workspace, 3, State.PARKED)
    add_quests(other_workspace, COUNT_CAP + 5, State.PLANNED)  # not ann's to see
    counts = inbox_counts(ann)
    assert counts == {"checkpoint": 999, "mine": 2, "handed_off": 3, "parked": 3}
    assert [counts[k].label for k in counts] == ["999", "2", "3", "3"]
    assert not any(count.more for count in counts.values())
    add_quests(workspace, 1, State.READY)
    counts = inbox_counts(ann)
    assert (counts["checkpoint"], counts["checkpoint"].label) == (1000, "1,000")
    assert not counts["checkpoint"].more


def test_past_the_cap_a_count_reads_1000_plus(workspace, django_assert_num_queries):
    ann = person("ann", shop=[Role.REVIEWER])
    add_quests(workspace, COUNT_CAP + 1, State.PLANNED)
    with django_assert_num_queries(2):  # the person's roles, the four counts
        counts = inbox_counts(ann)
    assert (counts["checkpoint"], counts["checkpoint"].more) == (COUNT_CAP, True)
    assert counts["checkpoint"].label == "1,000+"
    page = inbox_page(ann, InboxFilters())
    assert page.paginator.tally.label == "1,000+"
    assert len(page) == PAGE_SIZE and page.has_next()


def test_the_pages_past_the_cap_stay_reachable_and_whole(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    add_quests(workspace, COUNT_CAP + PAGE_SIZE + 1, State.PLANNED)
    last_capped = inbox_page(ann, InboxFilters(), COUNT_CAP // PAGE_SIZE)
    assert len(last_capped) == PAGE_SIZE and last_capped.has_next()
    beyond = inbox_page(ann, InboxFilters(), COUNT_CAP // PAGE_SIZE + 1)
    assert len(beyond) == PAGE_SIZE and beyond.has_next()
    assert beyond.paginator.tally.label == "1,050+"
    final = inbox_page(ann, InboxFilters(), COUNT_CAP // PAGE_SIZE + 2)
    assert [q.quest_id for q in final] == ["planned-0"]  # the oldest, alone on its page
    assert final.paginator.tally.label == "1,051" and not final.has_next()


def test_the_inbox_page_shows_1000_plus_on_its_tab_and_pager(client, workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    add_quests(workspace, COUNT_CAP + 1, State.HYPOTHESISED)
    add_quests(workspace, 12, State.PARKED)
    client.force_login(ann)
    html = client.get(reverse("inbox:inbox")).content.decode()
    assert 'aria-label="1,000+ quests">1,000+</span>' in html  # at a checkpoint
    assert 'aria-label="12 quests">12</span>' in html  # parked
    assert "Page 1 · 1,000+ quests" in html
    html = client.get(reverse("inbox:inbox") + "?tab=parked").content.decode()
    assert "Page 1 of 1 · 12 quests" in html


def test_oldest_first_is_latest_first_reversed_ties_included(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    add_quests(workspace, 3, State.READY)
    Quest.objects.update(updated_at=T0)  # all at the same moment: the tie-break decides
    latest = [q.quest_id for q in inbox_page(ann, InboxFilters(sort="updated"))]
    oldest = [q.quest_id for q in inbox_page(ann, InboxFilters(sort="oldest"))]
    assert oldest == latest[::-1]


def test_a_page_number_past_every_quest_shows_the_last_page(client, workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    add_quests(workspace, PAGE_SIZE + 2, State.PLANNED)
    client.force_login(ann)
    for number in ("3", "99999999999999999999999", "-4", "two"):
        answer = client.get(reverse("inbox:inbox"), {"page": number})
        assert answer.status_code == 200
    html = client.get(reverse("inbox:inbox"), {"page": "99999999999999999999999"}).content
    assert "Page 2 of 2 · 52 quests" in html.decode()
