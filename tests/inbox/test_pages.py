"""The dashboard through Django's test client: the inbox, a quest page, actions as forms."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from ledger.models import InboundEvent
from quests.models import Quest
from quests.roles import Role
from tests.quests.conftest import drive, person, work

pytestmark = pytest.mark.django_db


@pytest.fixture
def ann(workspace):
    return person("ann", shop=[Role.REVIEWER])


def logged_in(client, user):
    client.force_login(user)
    return client


def form_fields(html: str, action: str) -> dict:
    """The hidden fields of the first form on the page for ``action``."""
    start = html.index(f'name="action" value="{action}"')
    form = html[html.rindex("<form", 0, start) : html.index("</form>", start)]
    return dict(re.findall(r'name="(\w+)" value="([^"]*)"', form))


def test_every_page_needs_a_login(client, workspace):
    drive(workspace, "q1", "hypothesised")
    for url in (reverse("inbox:inbox"), reverse("inbox:quest", args=["shop", "q1"])):
        answer = client.get(url)
        assert answer.status_code == 302
        assert answer["Location"].startswith(reverse("inbox:login"))
    answer = client.post(reverse("inbox:act", args=["shop", "q1"]), {"action": "claim"})
    assert answer.status_code == 302


def test_the_inbox_lists_what_waits_with_its_checkpoint(client, workspace, ann):
    drive(workspace, "q1", "hypothesised")
    drive(workspace, "q2", "researching")
    page = logged_in(client, ann).get(reverse("inbox:inbox"))
    assert page.status_code == 200
    html = page.content.decode()
    assert reverse("inbox:quest", args=["shop", "q1"]) in html
    assert reverse("inbox:quest", args=["shop", "q2"]) not in html
    assert '<span class="badge checkpoint">A</span>' in html
    # htmx polling gets the live region alone, with the filters kept in its own URL
    live = client.get(reverse("inbox:inbox") + "?q=boom&tab=all", HTTP_HX_REQUEST="true")
    assert live.content.decode().startswith('<div id="inbox-live" hx-get="/?q=boom&amp;tab=all"')


def test_a_reviewer_claims_and_approves_through_the_forms(client, workspace, ann, settings):
    settings.EPHYRA_ACTION_WAIT_MS = 0
    drive(workspace, "q1", "hypothesised")
    client = logged_in(client, ann)
    url = reverse("inbox:quest", args=["shop", "q1"])
    html = client.get(url).content.decode()
    claim = form_fields(html, "claim")
    answer = client.post(reverse("inbox:act", args=["shop", "q1"]), claim)
    assert (answer.status_code, answer["X-Ephyra-Outcome"]) == (303, "queued")
    work(workspace)
    assert Quest.objects.get(quest_id="q1").claim == "ann"
    # The same form again (a double click) applies once.
    again = client.post(reverse("inbox:act", args=["shop", "q1"]), claim)
    assert again["X-Ephyra-Outcome"] == "applied"
    assert InboundEvent.objects.count() == 1

    html = client.get(url).content.decode()
    assert "review held by <strong>ann</strong>" in html
    decide = form_fields(html, "decide") | {"verdict": "approve"}
    client.post(reverse("inbox:act", args=["shop", "q1"]), decide)
    work(workspace)
    assert Quest.objects.get(quest_id="q1").state == "reproducing"


def test_a_stale_form_is_refused_and_the_fresh_state_is_shown(client, workspace, ann, settings):
    settings.EPHYRA_ACTION_WAIT_MS = 0
    drive(workspace, "q1", "hypothesised")
    client = logged_in(client, ann)
    url = reverse("inbox:quest", args=["shop", "q1"])
    claim = form_fields(client.get(url).content.decode(), "claim")
    bob = person("bob", shop=[Role.REVIEWER])
    other = logged_in(client.__class__(), bob)
    their_claim = form_fields(other.get(url).content.decode(), "claim")
    other.post(reverse("inbox:act", args=["shop", "q1"]), their_claim)
    work(workspace)
    answer = client.post(reverse("inbox:act", args=["shop", "q1"]), claim, follow=True)
    html = answer.content.decode()
    assert "Not done: the quest moved on since you saw it" in html
    assert "review held by <strong>bob</strong>" in html
    assert Quest.objects.get(quest_id="q1").claim == "bob"


def test_another_workspaces_quest_is_a_404_and_a_staff_member_cannot_act(
    client, workspace, other_workspace
):
    drive(other_workspace, "theirs", "hypothesised")
    drive(workspace, "q1", "hypothesised")
    staff = person("sam", shop=[Role.STAFF])
    client = logged_in(client, staff)
    assert client.get(reverse("inbox:quest", args=["other", "theirs"])).status_code == 404
    html = client.get(reverse("inbox:quest", args=["shop", "q1"])).content.decode()
    assert 'value="claim"' not in html  # no button offered
    forged = {"action": "claim", "seen_head": "x", "seen_revision": "1", "key": "k"}
    assert client.post(reverse("inbox:act", args=["shop", "q1"]), forged).status_code == 403
    assert not InboundEvent.objects.exists()


def test_html_in_titles_and_comments_is_inert(client, workspace, ann, settings):
    settings.EPHYRA_ACTION_WAIT_MS = 0
    from quests.engine import quest_apply
    from tests.core.story import Story

    story = Story("xss")
    signal = story.signal()
    evil = signal.model_copy(
        update={"signal": signal.signal.model_copy(update={"title": "<script>alert(1)</script>"})}
    )
    quest_apply(workspace, evil)
    client = logged_in(client, ann)
    client.post(
        reverse("inbox:act", args=["shop", "xss"]),
        {"action": "comment", "key": "c1", "text": "<img src=x onerror=alert(2)>"},
    )
    work(workspace)
    for url in (reverse("inbox:inbox") + "?tab=all", reverse("inbox:quest", args=["shop", "xss"])):
        html = client.get(url).content.decode()
        assert "<script>alert(1)</script>" not in html
        assert "<img src=x" not in html
    html = client.get(reverse("inbox:quest", args=["shop", "xss"])).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html


def test_the_quest_page_shows_the_path_timeline_proof_and_effects(client, workspace, ann):
    quest = drive(workspace, "q1", "ready")
    html = logged_in(client, ann).get(reverse("inbox:quest", args=["shop", "q1"])).content.decode()
    assert '<g class="state visited current" data-state="ready">' in html
    assert '<g class="state" data-state="closed">' in html
    assert "matches the canonical SHA-256 recomputed here" in html
    assert quest.journal_head[:12] in html
    assert "run_triage" in html and "checkpoint C" in html
    assert "<td>tests</td>" in html  # the proof's one check, passed


def queries_for(client, url, _=None) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_the_inbox_page_costs_the_same_queries_for_few_quests_or_many(
    client, workspace, ann, django_assert_max_num_queries
):
    client = logged_in(client, ann)
    url = reverse("inbox:inbox")
    drive(workspace, "few-0", "hypothesised")
    few = queries_for(client, url, django_assert_max_num_queries)
    for n in range(12):
        drive(workspace, f"many-{n}", ("hypothesised", "planned", "ready")[n % 3])
    assert queries_for(client, url, django_assert_max_num_queries) == few
    assert few <= 10


def test_the_quest_page_costs_the_same_queries_for_a_short_or_long_history(
    client, workspace, ann, django_assert_max_num_queries, settings
):
    settings.EPHYRA_ACTION_WAIT_MS = 0
    from ephyra.core.events import Claimed
    from ledger.inbound import submit_event
    from quests import actions
    from tests.core.story import T0

    client = logged_in(client, ann)
    drive(workspace, "q1", "hypothesised")
    url = reverse("inbox:quest", args=["shop", "q1"])
    short = queries_for(client, url, django_assert_max_num_queries)
    quest = Quest.objects.get(quest_id="q1")
    for n in range(6):  # comments, and claims from a stale page that the worker refuses
        actions.quest_comment(ann, quest, body=f"note {n}", key=f"c{n}")
        stale = Claimed(id=f"stale-{n}", quest="q1", at=T0, actor="ann")
        submit_event(workspace, stale, source="test", expect_head="0" * 40)
    work(workspace)
    assert "moved on since it was shown" in client.get(url).content.decode()
    assert queries_for(client, url, django_assert_max_num_queries) == short
