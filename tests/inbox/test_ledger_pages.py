"""The ledger page through Django's test client: who sees what, an admin's verdict on an
ambiguous write or a dead letter applied by the worker and audited, and what is refused."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from ephyra.compose import effect_adapters
from ledger.models import AuditEntry, InboundEvent, Operation
from ledger.selectors import LedgerFilters, ledger_page, operation_of, operation_totals
from quests.roles import Role
from tests.ledger import recorder
from tests.quests.conftest import drive, person, work

pytestmark = pytest.mark.django_db

LEDGER = reverse("inbox:ledger")
RESOLVE = reverse("inbox:ledger_resolve")


@pytest.fixture
def outside(settings):
    """Landing and proof go to the in-process outside world, which can be told to fail."""
    recorder.reset()
    settings.EPHYRA_EFFECT_ADAPTERS = {
        name: "tests.ledger.recorder.Recorder"
        for name in ("start_agent", "stop_agent", "request_checkpoint", "run_proof", "land")
    }
    effect_adapters.cache_clear()
    yield recorder
    effect_adapters.cache_clear()
    recorder.reset()


@pytest.fixture
def people(workspace, other_workspace):
    return {
        "reviewer": person("rita", shop=[Role.REVIEWER]),
        "admin": person("ada", shop=[Role.ADMIN]),
        "staff": person("sam", shop=[Role.STAFF]),
        "outsider": person("olga", other=[Role.ADMIN]),
    }


def ambiguous_land(workspace, outside, quest_id: str = "q1") -> Operation:
    """A landing whose write raised: sent, no answer. The worker leaves it ambiguous."""
    drive(workspace, quest_id, "landing")
    outside.BEHAVIOUR["land"] = "raise"
    work(workspace)
    return Operation.objects.get(workspace=workspace, quest_id=quest_id, type="land")


def as_(client, user):
    client.force_login(user)
    return client


def resolve_form(html: str, op: Operation) -> dict:
    """The fields of the resolve form of ``op`` on the page."""
    start = html.index(f'name="key" value="{op.key}"')
    form = html[html.rindex("<form", 0, start) : html.index("</form>", start)]
    return dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', form))


def test_the_ledger_answers_each_person_with_the_exact_status(
    client,
    workspace,
    other_workspace,
    people,
    outside,
):
    land = ambiguous_land(workspace, outside)
    theirs = ambiguous_land(other_workspace, outside, "t1")
    forged = {
        "workspace": "shop",
        "key": land.key,
        "verdict": "failed",
        "note": "forged",
        "token": "t",
    }
    answer = client.get(LEDGER)
    assert (answer.status_code, answer["Location"]) == (
        302,
        f"{reverse('inbox:login')}?next=/ledger/",
    )
    assert client.post(RESOLVE, forged).status_code == 302

    for who in ("reviewer", "admin", "staff"):
        html = as_(client, people[who]).get(LEDGER).content.decode()
        assert land.key in html and theirs.key not in html
        assert ('name="verdict"' in html) == (who == "admin")  # only an admin may resolve

    olga = as_(client, people["outsider"])
    html = olga.get(LEDGER).content.decode()
    assert theirs.key in html and land.key not in html
    assert olga.post(RESOLVE, forged).status_code == 404  # another workspace's operation

    for who in ("reviewer", "staff"):
        assert as_(client, people[who]).post(RESOLVE, forged).status_code == 403
    assert not InboundEvent.objects.filter(type="operation.resolve").exists()
    land.refresh_from_db()
    assert land.state == "ambiguous"


def test_an_admin_resolves_an_ambiguous_write_the_worker_applies_it_and_audits_the_account(
    client,
    workspace,
    people,
    outside,
    settings,
):
    settings.EPHYRA_ACTION_WAIT_MS = 0
    land = ambiguous_land(workspace, outside)
    ada = as_(client, people["admin"])
    html = ada.get(LEDGER + "?state=ambiguous").content.decode()
    # What is known: the error, the attempts, the request, and no check result.
    assert "TimeoutError: no answer from the outside world" in html
    assert "none recorded (the adapter could not tell)" in html
    assert "<dt>Deliveries</dt><dd>1</dd>" in html
    assert "&quot;head&quot;: &quot;" + "b" * 40 in html  # the request's payload

    fields = resolve_form(html, land) | {"verdict": "succeeded", "note": "it is on main"}
    answer = ada.post(RESOLVE, fields)
    assert (answer.status_code, answer["X-Ephyra-Outcome"]) == (303, "queued")
    assert answer["Location"] == LEDGER + "?state=ambiguous"
    work(workspace)
    land.refresh_from_db()
    assert (land.state, land.outcome["resolved_by"]) == ("succeeded", "ada")
    entry = AuditEntry.objects.get(workspace=workspace, action="operation.resolved")
    assert (entry.actor, entry.object, entry.payload["was"], entry.payload["now"]) == (
        "ada",
        f"operation:{land.key}",
        "ambiguous",
        "succeeded",
    )
    # The same form again (a double click) is answered from the first submission.
    again = ada.post(RESOLVE, fields, follow=True)
    assert again.redirect_chain[-1] == (LEDGER + "?state=ambiguous", 303)
    assert f"Resolved {land.key} as succeeded: it is now succeeded." in again.content.decode()
    assert InboundEvent.objects.filter(type="operation.resolve").count() == 1
    html = ada.get(LEDGER).content.decode()
    assert "resolved by ada (was ambiguous): “it is on main”" in html


def test_a_dead_letter_sent_round_again_is_delivered_afresh(
    client,
    workspace,
    people,
    outside,
    settings,
):
    settings.EPHYRA_ACTION_WAIT_MS = 0
    settings.EPHYRA_MAX_DELIVERIES = 1
    drive(workspace, "q1", "proving")
    outside.BEHAVIOUR["run_proof"] = "raise"
    work(workspace)
    proof = Operation.objects.get(workspace=workspace, type="run_proof")
    assert proof.state == "dead"
    ada = as_(client, people["admin"])
    html = ada.get(LEDGER + "?state=dead").content.decode()
    assert "The job failed on every delivery (1) and was set aside." in html
    fields = resolve_form(html, proof) | {"verdict": "absent", "note": "the runner is back"}
    # With htmx the answer is the page's live region, with the message in it.
    answer = ada.post(RESOLVE, fields, HTTP_HX_REQUEST="true")
    assert answer["X-Ephyra-Outcome"] == "queued"
    live = answer.content.decode()
    assert live.startswith('<div id="ledger-live">')
    assert "Queued: the worker of shop applies your verdict" in live
    outside.BEHAVIOUR["run_proof"] = "ok"
    work(workspace)
    proof.refresh_from_db()
    assert (proof.state, proof.attempts) == ("succeeded", 2)


def test_resolving_an_operation_that_waits_for_nobody_is_refused_with_the_reason(
    client, workspace, people
):
    drive(workspace, "q1", "proving")
    proof = Operation.objects.get(workspace=workspace, type="run_proof")
    ada = as_(client, people["admin"])
    fields = {"workspace": "shop", "key": proof.key, "verdict": "failed", "note": "n", "token": "t"}
    answer = ada.post(RESOLVE, fields, follow=True)
    assert answer.redirect_chain == [(LEDGER, 303)]
    assert (
        f"Not done: {proof.key} is pending; only ambiguous or dead operations are resolved"
        in answer.content.decode()
    )
    assert not InboundEvent.objects.filter(type="operation.resolve").exists()


def test_a_verdict_needs_a_note_and_a_known_verdict(
    client,
    workspace,
    people,
    outside,
):
    land = ambiguous_land(workspace, outside)
    ada = as_(client, people["admin"])
    base = {"workspace": "shop", "key": land.key, "token": "t"}
    answer = ada.post(RESOLVE, base | {"verdict": "succeeded", "note": "   "}, follow=True)
    assert "Not done: note: This field is required." in answer.content.decode()
    answer = ada.post(RESOLVE, base | {"verdict": "maybe", "note": "n"}, follow=True)
    assert "Not done: verdict: Select a valid choice." in answer.content.decode()
    assert not InboundEvent.objects.filter(type="operation.resolve").exists()
    land.refresh_from_db()
    assert land.state == "ambiguous"


def test_the_ledger_filters_and_counts_per_state(client, workspace, people, outside):
    land = ambiguous_land(workspace, outside)
    drive(workspace, "q2", "proving")
    proof = Operation.objects.get(quest_id="q2", type="run_proof")
    ada = as_(client, people["admin"])
    html = ada.get(LEDGER).content.decode()
    assert re.search(r'state=ambiguous"\s*>ambiguous<span class="count needs" aria-label="1 ', html)
    assert 'aria-label="7 operations">7</span>' in html  # q2's seven pending ones
    only = ada.get(LEDGER + "?type=land").content.decode()
    assert land.key in only and proof.key not in only
    by_quest = ada.get(LEDGER + "?quest=q2&state=pending").content.decode()
    assert proof.key in by_quest and land.key not in by_quest
    bad = ada.get(LEDGER + "?state=lost")
    assert bad.status_code == 400
    assert "Not filtered by state: Select a valid choice." in bad.content.decode()


def test_the_ledger_costs_the_same_queries_for_few_operations_or_many(
    client,
    workspace,
    people,
    outside,
    django_assert_num_queries,
):
    ambiguous_land(workspace, outside)
    ada = as_(client, people["admin"])
    # session, account, roles, counts per state, the page's count, the page's rows
    with django_assert_num_queries(6):
        few = ada.get(LEDGER)
    for i in range(2, 6):
        ambiguous_land(workspace, outside, f"q{i}")
    with django_assert_num_queries(6):
        many = ada.get(LEDGER)
    assert few.content.decode().count('class="resolve"') == 1
    assert many.content.decode().count('class="resolve"') == 5


def test_the_ledger_selectors_cost_a_fixed_number_of_queries(
    workspace, outside, django_assert_num_queries
):
    land = ambiguous_land(workspace, outside)
    drive(workspace, "q2", "proving")
    with django_assert_num_queries(2):  # the count and the rows
        page = ledger_page(["shop"], LedgerFilters(state="pending"))
        assert [op.workspace.slug for op in page] == ["shop"] * 7
    with django_assert_num_queries(0):  # a workspace the person may not read lists nothing
        assert list(ledger_page(["shop"], LedgerFilters(workspace="other"))) == []
    with django_assert_num_queries(1):
        totals = operation_totals(["shop"])
    assert (totals["ambiguous"], totals["pending"], totals["dead"]) == (1, 7, 0)
    with django_assert_num_queries(1):
        assert operation_of(["shop"], "shop", land.key).workspace.slug == "shop"
    with django_assert_num_queries(0):
        assert operation_of(["other"], "shop", land.key) is None
