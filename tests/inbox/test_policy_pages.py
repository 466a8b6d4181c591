"""The policy page through Django's test client: who may see and do what, the editor's checks,
and four eyes: a change proposed by one admin becomes what the worker loads only when another
admin approves it."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from ledger.models import AuditEntry
from quests.models import PolicyProposal, PolicyVersion, Workspace
from quests.policies import (
    OwnProposal,
    PolicyRefused,
    policy_approve,
    policy_propose,
    policy_propose_version,
    policy_reject,
)
from quests.roles import Role
from quests.workspaces import workspace_policy
from tests.quests.conftest import person

pytestmark = pytest.mark.django_db

DEFAULT = (Path(__file__).resolve().parents[2] / "ephyra" / "policy" / "default.yaml").read_text()
FIVE = DEFAULT.replace("attempts: 3", "attempts: 5")
SEVEN = DEFAULT.replace("attempts: 3", "attempts: 7")


@pytest.fixture
def people(workspace, other_workspace):
    return {
        "ann": person("ann", shop=[Role.ADMIN]),
        "bob": person("bob", shop=[Role.ADMIN]),
        "reviewer": person("rita", shop=[Role.REVIEWER]),
        "staff": person("sam", shop=[Role.STAFF]),
        "other admin": person("otto", other=[Role.ADMIN]),
    }


def as_(user) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def page_url(slug: str = "shop") -> str:
    return reverse("inbox:policy", args=[slug])


def text_of(response) -> str:
    """The page as a person reads it: tags dropped (a block's as a space), entities decoded,
    spaces collapsed."""
    body = re.sub(BLOCK, " ", response.content.decode())
    body = re.sub(r"<[^>]+>", "", body)
    return re.sub(r"\s+", " ", html.unescape(body))


BLOCK = r"</?(?:dt|dd|li|div|p|td|th|tr|h\d|ul|ol|section|pre|details|summary|form)\b[^>]*>"


def state() -> tuple:
    """Everything a refused request must leave as it was."""
    return (
        list(Workspace.objects.order_by("pk").values_list("slug", "policy_id")),
        list(PolicyVersion.objects.order_by("pk").values_list("pk", "digest")),
        list(PolicyProposal.objects.order_by("pk").values_list("pk", "state", "decided_by")),
        AuditEntry.objects.count(),
    )


def last_audit(workspace: Workspace) -> AuditEntry:
    return AuditEntry.objects.filter(workspace=workspace).order_by("-sequence").first()


# --- who may -------------------------------------------------------------------------------


def requests_for(version: PolicyVersion, proposal: PolicyProposal) -> dict[str, tuple]:
    return {
        "the page": ("get", page_url(), {}),
        "a diff": ("get", page_url() + "?diff=1..2", {}),
        "propose a text": ("post", reverse("inbox:policy_propose", args=["shop"]), {"text": SEVEN}),
        "check a text": (
            "post",
            reverse("inbox:policy_propose", args=["shop"]),
            {"text": SEVEN, "intent": "check"},
        ),
        "propose a version": (
            "post",
            reverse("inbox:policy_propose_version", args=["shop"]),
            {"version": version.pk},
        ),
        "approve": ("post", reverse("inbox:policy_approve", args=["shop", proposal.pk]), {}),
        "reject": (
            "post",
            reverse("inbox:policy_reject", args=["shop", proposal.pk]),
            {"reason": "no"},
        ),
        "withdraw": ("post", reverse("inbox:policy_withdraw", args=["shop", proposal.pk]), {}),
    }


REQUESTS = [
    "the page",
    "a diff",
    "propose a text",
    "check a text",
    "propose a version",
    "approve",
    "reject",
    "withdraw",
]


@pytest.mark.parametrize("request_name", REQUESTS)
@pytest.mark.parametrize(
    ("who", "status"),
    [("anonymous", 302), ("reviewer", 403), ("staff", 403), ("other admin", 404)],
)
def test_only_the_workspaces_admins_reach_its_policy_page_and_actions(
    workspace, people, who, status, request_name
):
    version = PolicyVersion.objects.create(workspace=workspace, digest="sha256:1", text=DEFAULT)
    proposal = policy_propose(people["ann"], workspace, FIVE)
    method, url, data = requests_for(version, proposal)[request_name]
    before = state()
    response = getattr(as_(people.get(who)), method)(url, data)
    assert response.status_code == status
    if status == 302:
        assert response["Location"].startswith(reverse("inbox:login"))
    assert state() == before


def test_an_admin_reaches_the_page_and_each_action_with_its_status(workspace, people):
    ann, bob = as_(people["ann"]), as_(people["bob"])
    assert ann.get(page_url()).status_code == 200
    propose = reverse("inbox:policy_propose", args=["shop"])
    assert ann.post(propose, {"text": FIVE, "intent": "check"}).status_code == 200
    answer = ann.post(propose, {"text": FIVE, "note": "more room"})
    assert (answer.status_code, answer["Location"], answer["X-Ephyra-Outcome"]) == (
        303,
        page_url(),
        "applied",
    )
    proposal = PolicyProposal.objects.get()
    assert bob.post(reverse("inbox:policy_approve", args=["shop", proposal.pk])).status_code == 303
    back = reverse("inbox:policy_propose_version", args=["shop"])
    first = PolicyVersion.objects.get(digest=proposal.version.digest)
    assert ann.post(back, {"version": first.pk}).status_code == 303  # already current: refused
    assert bob.post(propose, {"text": SEVEN}).status_code == 303
    seven = PolicyProposal.objects.get(state="open")
    withdraw = reverse("inbox:policy_withdraw", args=["shop", seven.pk])
    assert bob.post(withdraw).status_code == 303
    assert bob.post(propose, {"text": SEVEN}).status_code == 303
    again = PolicyProposal.objects.get(state="open")
    reject = reverse("inbox:policy_reject", args=["shop", again.pk])
    assert ann.post(reject, {"reason": "not now"}).status_code == 303
    assert ann.get(reverse("inbox:policy_approve", args=["shop", again.pk])).status_code == 405
    missing = reverse("inbox:policy_approve", args=["shop", 999_999])
    assert ann.post(missing).status_code == 404


def test_another_workspaces_proposal_is_a_404_on_this_workspaces_page(
    workspace, other_workspace, people
):
    theirs = policy_propose(people["other admin"], other_workspace, FIVE)
    before = state()
    response = as_(people["bob"]).post(reverse("inbox:policy_approve", args=["shop", theirs.pk]))
    assert response.status_code == 404
    assert state() == before


def test_the_services_check_the_role_themselves(workspace, people):
    for who in ("reviewer", "staff", "other admin"):
        with pytest.raises(PermissionDenied):
            policy_propose(people[who], workspace, FIVE)
    proposal = policy_propose(people["ann"], workspace, FIVE)
    for who in ("reviewer", "staff", "other admin"):
        with pytest.raises(PermissionDenied):
            policy_approve(people[who], proposal)
        with pytest.raises(PermissionDenied):
            policy_reject(people[who], proposal, "no")
    assert PolicyProposal.objects.get().state == "open"


def test_every_form_on_the_page_carries_a_csrf_token_and_a_post_without_one_is_refused(
    workspace, people
):
    policy_propose(people["ann"], workspace, FIVE)
    page = as_(people["bob"]).get(page_url()).content.decode()
    forms = re.findall(r'<form method="post".*?</form>', page, re.S)
    assert len(forms) >= 4
    assert all("csrfmiddlewaretoken" in form for form in forms)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(people["bob"])
    before = state()
    proposal = PolicyProposal.objects.get()
    response = strict.post(reverse("inbox:policy_approve", args=["shop", proposal.pk]))
    assert response.status_code == 403
    assert state() == before


# --- what the page shows --------------------------------------------------------------------


def test_an_admin_sees_the_current_policy_with_line_numbers_and_who_proposed_and_approved_it(
    workspace, people
):
    proposal = policy_propose(people["ann"], workspace, FIVE, "three is too few")
    policy_approve(people["bob"], proposal)
    page = as_(people["ann"]).get(page_url())
    body = page.content.decode()
    words = text_of(page)
    assert proposal.version.digest in body
    assert f"Proposed by ann, {proposal.created_at:%Y-%m-%d %H:%M} UTC" in words
    assert "Approved by bob" in words
    number = next(n for n, line in enumerate(FIVE.split("\n"), 1) if "attempts: 5" in line)
    assert re.search(
        rf'<li id="cur-L{number}"><span class="ln" aria-hidden="true">{number}</span>'
        r"<code>\s*attempts: 5</code></li>",
        body,
    )
    assert f"#{proposal.pk} proposed by ann" in words and "approved by bob" in words


def test_a_workspace_without_a_version_shows_the_default_and_offers_it_to_edit(workspace, people):
    page = as_(people["ann"]).get(page_url())
    assert "follows the built-in default policy" in text_of(page)
    # In the editor, after the newline a browser drops after <textarea>, so that a text
    # starting with a blank line keeps it.
    assert 'wrap="off" required>\n' + escape(DEFAULT) + "</textarea>" in page.content.decode()


# --- the editor ----------------------------------------------------------------------------


def test_an_invalid_policy_shows_each_problem_with_its_line_and_changes_nothing(workspace, people):
    broken = DEFAULT.replace("A: {mode: blocking}", "A: {mode: sometimes}").replace(
        "attempts: 3", "attempts: 0"
    )
    lines = broken.split("\n")
    mode_line = next(n for n, line in enumerate(lines, 1) if "sometimes" in line)
    attempts_line = next(n for n, line in enumerate(lines, 1) if "attempts: 0" in line)
    before = state()
    response = as_(people["ann"]).post(
        reverse("inbox:policy_propose", args=["shop"]), {"text": broken, "note": "try"}
    )
    assert response.status_code == 400
    words = text_of(response)
    assert "not a valid policy 2 problems; nothing was stored" in words
    assert f"{mode_line}: checkpoints.A.mode: Input should be" in words
    assert f"{attempts_line}: proof.attempts: Input should be greater than or equal to 1" in words
    assert f'<li id="edit-L{mode_line}" class="marked">' in response.content.decode()
    assert "sometimes" in response.content.decode()  # the text is kept to be fixed
    assert state() == before


def test_text_that_is_not_yaml_is_refused_with_its_line(workspace, people):
    response = as_(people["ann"]).post(
        reverse("inbox:policy_propose", args=["shop"]),
        {"text": "version: 1\ncheckpoints: [unclosed\n"},
    )
    assert response.status_code == 400
    assert re.search(r"\d+: \(top\): not valid YAML", text_of(response))
    assert not PolicyVersion.objects.exists()


def test_checking_a_text_stores_nothing_and_htmx_gets_the_result_alone(workspace, people):
    client = as_(people["ann"])
    url = reverse("inbox:policy_propose", args=["shop"])
    before = state()
    answer = client.post(url, {"text": FIVE, "intent": "check"})
    assert answer.status_code == 200
    assert "valid The worker would load this text as it is." in text_of(answer)
    partial = client.post(url, {"text": "version: 2", "intent": "check"}, HTTP_HX_REQUEST="true")
    assert partial.status_code == 200
    assert partial.content.decode().startswith('<div id="policy-check"')
    assert "not a valid policy" in text_of(partial)
    assert state() == before


def test_line_ends_from_a_browser_are_stored_as_the_files_own(workspace, people):
    as_(people["ann"]).post(
        reverse("inbox:policy_propose", args=["shop"]), {"text": FIVE.replace("\n", "\r\n")}
    )
    assert PolicyVersion.objects.get().text == FIVE


# --- four eyes -----------------------------------------------------------------------------


def test_a_proposal_by_one_admin_approved_by_another_becomes_what_the_worker_loads(
    workspace, people
):
    ann, bob = as_(people["ann"]), as_(people["bob"])
    ann.post(reverse("inbox:policy_propose", args=["shop"]), {"text": FIVE, "note": "roomier"})
    proposal = PolicyProposal.objects.get()
    assert (proposal.state, proposal.proposed_by, proposal.note) == (
        "open",
        people["ann"],
        "roomier",
    )
    workspace.refresh_from_db()
    assert workspace.policy_id is None
    assert workspace_policy(workspace).proof_attempts == 3  # proposed is not loaded
    entry = last_audit(workspace)
    assert (entry.actor, entry.action) == ("person:ann", "policy.proposed")
    assert entry.payload == {
        "proposal": proposal.pk,
        "digest": proposal.version.digest,
        "current": None,
        "note": "roomier",
    }

    page = text_of(bob.get(page_url()))
    assert f"Open proposal #{proposal.pk}" in page
    assert "- attempts: 3 + attempts: 5" in page  # the diff the approver reads
    answer = bob.post(reverse("inbox:policy_approve", args=["shop", proposal.pk]), follow=True)
    assert "Approved:" in text_of(answer)

    workspace = Workspace.objects.get(slug="shop")
    assert workspace.policy_id == proposal.version_id
    assert workspace_policy(workspace).proof_attempts == 5
    proposal.refresh_from_db()
    assert (proposal.state, proposal.decided_by) == ("approved", people["bob"])
    entry = last_audit(workspace)
    assert (entry.actor, entry.action) == ("person:bob", "policy.approved")
    assert entry.payload == {
        "proposal": proposal.pk,
        "digest": proposal.version.digest,
        "previous": None,
        "proposed_by": "ann",
    }


@pytest.mark.parametrize("superuser", [False, True])
def test_an_admin_cannot_approve_their_own_proposal_not_even_with_a_forged_post(
    workspace, people, superuser
):
    proposer = people["ann"]
    if superuser:
        proposer.is_superuser = True
        proposer.save()
    proposal = policy_propose(proposer, workspace, FIVE)
    client = as_(proposer)
    page = client.get(page_url())
    assert "You proposed this." in text_of(page)
    assert reverse("inbox:policy_approve", args=["shop", proposal.pk]) not in page.content.decode()
    before = state()
    forged = client.post(reverse("inbox:policy_approve", args=["shop", proposal.pk]))
    assert forged.status_code == 403
    assert (
        f"you proposed this change (proposal #{proposal.pk}); four eyes: another admin of shop "
        "must approve it" in text_of(forged)
    )
    assert state() == before
    with pytest.raises(OwnProposal):
        policy_approve(proposer, proposal)


def test_approving_a_decided_proposal_again_is_refused_and_changes_nothing(workspace, people):
    proposal = policy_propose(people["ann"], workspace, FIVE)
    bob = as_(people["bob"])
    url = reverse("inbox:policy_approve", args=["shop", proposal.pk])
    assert bob.post(url)["X-Ephyra-Outcome"] == "applied"
    before = state()
    again = bob.post(url, follow=True)  # a double click
    assert again.redirect_chain[-1][1] == 303
    assert f"Not approved: proposal #{proposal.pk} is already approved by bob." in text_of(again)
    assert state() == before


def test_a_rollback_is_a_proposal_of_the_earlier_version_approved_the_same_way(workspace, people):
    ann, bob = people["ann"], people["bob"]
    policy_approve(bob, policy_propose(ann, workspace, FIVE))
    policy_approve(ann, policy_propose(bob, workspace, SEVEN))
    workspace.refresh_from_db()
    assert workspace_policy(workspace).proof_attempts == 7
    earlier = PolicyVersion.objects.get(text=FIVE)

    page = text_of(as_(ann).get(page_url()))
    assert "Propose as current (roll back)" in page
    answer = as_(ann).post(
        reverse("inbox:policy_propose_version", args=["shop"]),
        {"version": earlier.pk, "note": "7 made it slow"},
    )
    assert answer["X-Ephyra-Outcome"] == "applied"
    rollback = PolicyProposal.objects.get(state="open")
    assert (rollback.version, rollback.note) == (earlier, "7 made it slow")
    assert PolicyVersion.objects.count() == 2  # the same version, not a copy
    workspace.refresh_from_db()
    assert workspace_policy(workspace).proof_attempts == 7  # not yet

    as_(bob).post(reverse("inbox:policy_approve", args=["shop", rollback.pk]))
    workspace.refresh_from_db()
    assert workspace.policy == earlier
    assert workspace_policy(workspace).proof_attempts == 5
    entry = last_audit(workspace)
    assert (entry.action, entry.payload["previous"]) == (
        "policy.approved",
        PolicyVersion.objects.get(text=SEVEN).digest,
    )


def test_typing_an_earlier_text_again_proposes_that_version(workspace, people):
    policy_approve(people["bob"], policy_propose(people["ann"], workspace, FIVE))
    policy_approve(people["ann"], policy_propose(people["bob"], workspace, SEVEN))
    proposal = policy_propose(people["ann"], workspace, FIVE)
    assert proposal.version == PolicyVersion.objects.get(text=FIVE)
    assert PolicyVersion.objects.count() == 2


def test_a_rejected_proposal_leaves_the_current_policy_and_says_why(workspace, people):
    proposal = policy_propose(people["ann"], workspace, FIVE)
    bob = as_(people["bob"])
    url = reverse("inbox:policy_reject", args=["shop", proposal.pk])
    before = state()
    empty = bob.post(url, {"reason": "  "}, follow=True)
    assert "Not rejected: a reason is required." in text_of(empty)
    assert state() == before

    answer = bob.post(url, {"reason": "attempts are fine at 3"}, follow=True)
    assert f"Rejected proposal #{proposal.pk}" in text_of(answer)
    proposal.refresh_from_db()
    assert (proposal.state, proposal.decided_by, proposal.reason) == (
        "rejected",
        people["bob"],
        "attempts are fine at 3",
    )
    workspace.refresh_from_db()
    assert workspace.policy_id is None
    entry = last_audit(workspace)
    assert (entry.actor, entry.action, entry.payload["reason"]) == (
        "person:bob",
        "policy.rejected",
        "attempts are fine at 3",
    )
    assert "rejected by bob" in text_of(answer) and "“attempts are fine at 3”" in text_of(answer)


def test_a_second_proposal_is_refused_while_one_is_open(workspace, people):
    first = policy_propose(people["ann"], workspace, FIVE)
    before = state()
    answer = as_(people["bob"]).post(
        reverse("inbox:policy_propose", args=["shop"]), {"text": SEVEN}
    )
    assert answer.status_code == 409
    assert (
        f"shop already has an open proposal (#{first.pk}, by ann): it must be approved, "
        "rejected or withdrawn before another is made" in text_of(answer)
    )
    assert "attempts: 7" in answer.content.decode()  # the text is kept
    assert state() == before
    version = PolicyVersion.objects.get()
    with pytest.raises(PolicyRefused):
        policy_propose_version(people["bob"], version)


def test_proposing_the_current_policy_is_refused(workspace, people):
    policy_approve(people["bob"], policy_propose(people["ann"], workspace, FIVE))
    before = state()
    answer = as_(people["ann"]).post(reverse("inbox:policy_propose", args=["shop"]), {"text": FIVE})
    assert answer.status_code == 409
    assert "this text already is the current policy of shop" in text_of(answer)
    assert state() == before


def test_the_proposer_may_withdraw_and_another_admin_may_not(workspace, people):
    proposal = policy_propose(people["ann"], workspace, FIVE)
    url = reverse("inbox:policy_withdraw", args=["shop", proposal.pk])
    before = state()
    theirs = as_(people["bob"]).post(url, follow=True)
    assert "Not withdrawn: only ann, who proposed it, may withdraw" in text_of(theirs)
    assert state() == before
    as_(people["ann"]).post(url, {"reason": "a typo"})
    proposal.refresh_from_db()
    assert (proposal.state, proposal.reason) == ("withdrawn", "a typo")
    assert last_audit(workspace).action == "policy.withdrawn"
    policy_propose(people["bob"], workspace, SEVEN)  # the way is free again


def test_two_open_proposals_cannot_be_stored_even_past_the_service(workspace, people):
    from django.db import IntegrityError, transaction

    first = policy_propose(people["ann"], workspace, FIVE)
    with pytest.raises(IntegrityError), transaction.atomic():
        PolicyProposal.objects.create(
            workspace=workspace, version=first.version, proposed_by=people["bob"]
        )


# --- diffs ---------------------------------------------------------------------------------


def test_the_diff_between_two_versions_is_a_readable_unified_diff_with_html_escaped(
    workspace, people
):
    evil = FIVE.replace("# docs/policy.md", "# <script>alert(1)</script>")
    policy_approve(people["bob"], policy_propose(people["ann"], workspace, FIVE))
    policy_approve(people["ann"], policy_propose(people["bob"], workspace, evil))
    page = as_(people["ann"]).get(page_url() + "?diff=1..2")
    assert page.status_code == 200
    body = page.content.decode()
    assert "<script>alert(1)</script>" not in body
    assert (
        '<span class="dl added">+# &lt;script&gt;alert(1)&lt;/script&gt; explains each field.'
        "</span>" in body
    )
    assert '<span class="dl removed">-# docs/policy.md explains each field.</span>' in body
    assert '<span class="dl hunk">@@ -1,5 +1,5 @@</span>' in body
    # the diff form's two fields come to the same
    same = as_(people["ann"]).get(page_url() + "?a=1&b=2").content.decode()
    assert '<span class="dl added">+# &lt;script&gt;' in same


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?diff=1..9", "diff: there is no version 9; this workspace has versions 1 to 2"),
        ("?diff=1", "diff: write it as ?diff=<a>..<b>, two version numbers"),
        ("?diff=x..1", "diff: 'x' is not a version number"),
        ("?show=0", "show: there is no version 0; this workspace has versions 1 to 2"),
    ],
)
def test_a_diff_or_version_that_names_no_version_is_a_400_that_says_so(
    workspace, people, query, message
):
    policy_approve(people["bob"], policy_propose(people["ann"], workspace, FIVE))
    policy_approve(people["ann"], policy_propose(people["bob"], workspace, SEVEN))
    answer = as_(people["ann"]).get(page_url() + query)
    assert answer.status_code == 400
    assert message in text_of(answer)


def test_a_version_is_shown_with_its_line_numbers(workspace, people):
    policy_approve(people["bob"], policy_propose(people["ann"], workspace, FIVE))
    page = as_(people["ann"]).get(page_url() + "?show=1").content.decode()
    assert '<h2 id="shown-title">Version 1</h2>' in page
    assert (
        '<li id="v-L3"><span class="ln" aria-hidden="true">3</span><code>version: 1</code>' in page
    )


# --- cost ----------------------------------------------------------------------------------


def queries_for(client, url) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_the_policy_page_costs_the_same_queries_for_few_versions_or_many(workspace, people):
    ann, bob = people["ann"], people["bob"]
    client = as_(ann)
    policy_approve(bob, policy_propose(ann, workspace, FIVE))
    policy_propose(ann, workspace, SEVEN)
    few = queries_for(client, page_url() + "?diff=1..2&show=1")
    PolicyProposal.objects.filter(state="open").update(state="withdrawn")
    for n in range(8):
        text = DEFAULT.replace("attempts: 3", f"attempts: {10 + n}")
        policy_approve(
            bob if n % 2 == 0 else ann, policy_propose(ann if n % 2 == 0 else bob, workspace, text)
        )
    policy_propose(ann, workspace, SEVEN.replace("7", "8"))
    assert queries_for(client, page_url() + "?diff=1..9&show=3") == few
    assert few <= 8
