"""The admin, through Django's test client, as a superuser.

What the engine, the worker and intake write is viewable and never changed there; workspaces
and policy versions change only through their services, whose refusals show on the form, and a
version becomes current only when a second admin approves its proposal.
"""

from __future__ import annotations

import html
import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from ledger.models import AuditEntry, InboundEvent, Lease, Operation, UsageReceipt
from quests.models import PolicyProposal, PolicyVersion, Quest, Workspace

pytestmark = pytest.mark.django_db

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
POLICY = (Path(__file__).resolve().parents[2] / "ephyra" / "policy" / "default.yaml").read_text()

# Every model only the engine, the worker or intake writes, by its admin URL.
READ_ONLY = [
    "quests/quest",
    "ledger/operation",
    "ledger/inboundevent",
    "ledger/lease",
    "ledger/usagereceipt",
    "ledger/auditentry",
    "intake/webhookdelivery",
    "intake/reviewlink",
    "intake/ingestedsignal",
    "intake/fingerprintmute",
]
# Of those, the ones a journaled quest and a submitted event leave rows in.
ROWS = {
    "quests/quest": Quest,
    "ledger/operation": Operation,
    "ledger/inboundevent": InboundEvent,
    "ledger/lease": Lease,
    "ledger/usagereceipt": UsageReceipt,
    "ledger/auditentry": AuditEntry,
}


@pytest.fixture
def admin_client(client):
    get_user_model().objects.create_superuser("ann", "ann@example.com", "correct horse")
    client.login(username="ann", password="correct horse")
    return client


@pytest.fixture
def shop(git_repository, settings, tmp_path):
    """A workspace with the main-line quest journaled and one more event queued for a worker."""
    settings.DATA_DIR = tmp_path / "data"
    out = StringIO()
    call_command("workspace", "add", "shop", str(git_repository()), stdout=out)
    call_command("apply_events", "shop", str(EXAMPLES / "main-line.jsonl"), stdout=out)
    queued = tmp_path / "queued.jsonl"
    signal = {"id": "s2", "fingerprint": "fp2", "severity": "error", "title": "boom"}
    queued.write_text(
        json.dumps(
            {"type": "signal_sensed", "id": "x1", "quest": "q2", "at": "2026-12-01T08:00:00Z"}
            | {"signal": signal}
        )
        + "\n"
    )
    call_command("apply_events", "shop", str(queued), "--submit", "--wait", "0", stdout=out)
    workspace = Workspace.objects.get(slug="shop")
    # Spend arrives from outside the machine (the runner, a model backend): a row of its own.
    UsageReceipt.objects.create(
        workspace=workspace, quest_id="checkout-500", key="r1", source="runner", tokens=10
    )
    return workspace


def form_errors(response) -> list[str]:
    """The texts of the error lists a form page shows."""
    body = response.content.decode()
    return [
        html.unescape(re.sub(r"<[^>]+>", "", item)).strip()
        for errors in re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', body, re.S)
        for item in re.findall(r"<li>(.*?)</li>", errors, re.S)
    ]


@pytest.mark.parametrize("model", READ_ONLY)
def test_a_read_only_model_refuses_to_be_added(admin_client, model):
    assert admin_client.get(f"/admin/{model}/add/").status_code == 403
    assert admin_client.post(f"/admin/{model}/add/", {}).status_code == 403
    listing = admin_client.get(f"/admin/{model}/")
    assert listing.status_code == 200
    assert "delete_selected" not in listing.content.decode()
    assert f'href="/admin/{model}/add/"' not in listing.content.decode()


@pytest.mark.parametrize("model", sorted(ROWS))
def test_a_read_only_row_is_viewable_and_refuses_change_and_delete(admin_client, shop, model):
    rows = ROWS[model].objects
    before = rows.count()
    row = rows.first()
    assert row is not None, f"the fixture left no {model}"
    view = admin_client.get(f"/admin/{model}/{row.pk}/change/")
    assert view.status_code == 200
    assert 'type="submit"' not in view.content.decode().split('id="content-main"')[1]
    assert admin_client.post(f"/admin/{model}/{row.pk}/change/", {}).status_code == 403
    assert admin_client.get(f"/admin/{model}/{row.pk}/delete/").status_code == 403
    assert admin_client.post(f"/admin/{model}/{row.pk}/delete/", {"post": "yes"}).status_code == (
        403
    )
    bulk = admin_client.post(
        f"/admin/{model}/",
        {"action": "delete_selected", "index": "0", "_selected_action": [row.pk], "post": "yes"},
    )
    assert bulk.status_code == 200  # the list again: there is no such action to run
    assert rows.count() == before


def test_a_quest_deleted_nowhere_is_still_there_after_all_that(admin_client, shop):
    admin_client.post(
        "/admin/quests/quest/",
        {
            "action": "delete_selected",
            "index": "0",
            "_selected_action": list(Quest.objects.values_list("pk", flat=True)),
            "post": "yes",
        },
    )
    assert Quest.objects.get(quest_id="checkout-500").state == "closed"


def test_the_labels_read_as_english(admin_client):
    index = admin_client.get("/admin/").content.decode()
    assert "Webhook deliveries" in index and "Webhook deliverys" not in index
    assert "Audit entries" in index and "Audit entrys" not in index


def test_the_index_groups_otlp_tokens_with_intake_not_under_forge_webhooks(admin_client):
    index = admin_client.get("/admin/").content.decode()
    sections = dict(
        re.findall(
            r'<caption>\s*<a [^>]*class="section"[^>]*>([^<]+)</a>(.*?)</table>', index, re.S
        )
    )
    assert "Forge webhooks" not in sections
    intake = sections["Intake: forge webhooks and OpenTelemetry"]
    assert "Ingest tokens" in intake and "Webhook deliveries" in intake
    assert "Audit entries" in sections["Ledger and audit log"]
    assert "Policy versions" in sections["Quests and workspaces"]


# --- workspaces -----------------------------------------------------------------------------


def test_a_workspace_added_in_the_admin_is_made_by_workspace_create(
    admin_client, git_repository, settings, tmp_path
):
    settings.DATA_DIR = tmp_path / "data"
    repo = git_repository(branches=("main", "release"))
    response = admin_client.post(
        "/admin/quests/workspace/add/",
        {"slug": "shop", "source": str(repo), "base_branch": "release", "name": "The shop"},
    )
    assert response.status_code == 302, form_errors(response)
    workspace = Workspace.objects.get(slug="shop")
    assert (workspace.name, workspace.base_branch, workspace.remote) == (
        "The shop",
        "release",
        str(repo),
    )
    assert Path(workspace.repository) == tmp_path / "data" / "mirrors" / "shop.git"
    assert (Path(workspace.repository) / "refs").is_dir()  # mirrored, as the command does


def test_a_workspace_on_a_missing_branch_is_refused_on_the_form(
    admin_client, git_repository, settings, tmp_path
):
    settings.DATA_DIR = tmp_path / "data"
    repo = git_repository(branches=("main", "release"))
    response = admin_client.post(
        "/admin/quests/workspace/add/",
        {"slug": "shop", "source": str(repo), "base_branch": "develop", "name": ""},
    )
    assert response.status_code == 200
    assert form_errors(response) == [f"{repo} has no branch 'develop'; its branches: main, release"]
    assert not Workspace.objects.exists()


def test_a_workspace_url_with_a_password_is_refused_on_the_form(admin_client, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    response = admin_client.post(
        "/admin/quests/workspace/add/",
        {
            "slug": "shop",
            "source": "https://bot:hunter2@example.com/shop.git",
            "base_branch": "main",
        },
    )
    assert response.status_code == 200
    assert form_errors(response)[0].startswith("the repository URL carries a password")
    assert not Workspace.objects.exists()
    assert not (tmp_path / "data" / "mirrors" / "shop.git").exists()


def test_a_workspace_keeps_its_repository_branch_and_slug_when_edited(admin_client, shop):
    page = admin_client.get(f"/admin/quests/workspace/{shop.pk}/change/").content.decode()
    assert 'name="name"' in page
    for field in ("slug", "repository", "base_branch", "remote", "policy"):
        assert f'name="{field}"' not in page
    response = admin_client.post(
        f"/admin/quests/workspace/{shop.pk}/change/",
        {
            "name": "Shop",
            "slug": "elsewhere",
            "repository": "/tmp/other.git",
            "base_branch": "develop",
            "remote": "https://bot:pw@example.com/x.git",
        },
    )
    assert response.status_code == 302
    shop.refresh_from_db()
    assert shop.name == "Shop"
    assert (shop.slug, shop.base_branch) == ("shop", "main")
    assert shop.repository.endswith("mirrors/shop.git") and "pw" not in shop.remote


def test_a_workspace_is_not_deleted_in_the_admin(admin_client, shop):
    assert admin_client.get(f"/admin/quests/workspace/{shop.pk}/delete/").status_code == 403
    assert Workspace.objects.filter(pk=shop.pk).exists()


# --- policy versions ------------------------------------------------------------------------


def test_a_policy_version_is_added_with_its_digest_and_reviewer(admin_client, shop):
    response = admin_client.post(
        "/admin/quests/policyversion/add/", {"workspace": shop.pk, "text": POLICY}
    )
    assert response.status_code == 302, form_errors(response)
    version = PolicyVersion.objects.get()
    assert version.digest.startswith("sha256:") and version.reviewed_by == "ann"
    shop.refresh_from_db()
    assert shop.policy_id is None  # adding a version does not make it current


def test_an_invalid_policy_is_refused_with_the_line_of_each_problem(admin_client, shop):
    invalid = POLICY.replace("mode: blocking", "mode: sometimes", 1)
    line = next(n for n, text in enumerate(invalid.splitlines(), 1) if "sometimes" in text)
    response = admin_client.post(
        "/admin/quests/policyversion/add/", {"workspace": shop.pk, "text": invalid}
    )
    assert response.status_code == 200
    [error] = form_errors(response)
    assert error.startswith(f"line {line}: checkpoints.")
    assert "sometimes" in response.content.decode()  # the text is kept on the form to fix
    assert not PolicyVersion.objects.exists()


def test_text_that_is_not_yaml_is_refused_with_its_line(admin_client, shop):
    response = admin_client.post(
        "/admin/quests/policyversion/add/",
        {"workspace": shop.pk, "text": "version: 1\ncheckpoints: [unclosed\n"},
    )
    assert response.status_code == 200
    [error] = form_errors(response)
    assert re.match(r"line \d+: \(top\): not valid YAML", error), error
    assert not PolicyVersion.objects.exists()


def test_the_same_policy_text_twice_is_a_form_error_not_a_server_error(admin_client, shop):
    first = admin_client.post(
        "/admin/quests/policyversion/add/", {"workspace": shop.pk, "text": POLICY}
    )
    assert first.status_code == 302
    again = admin_client.post(
        "/admin/quests/policyversion/add/", {"workspace": shop.pk, "text": POLICY}
    )
    assert again.status_code == 200
    digest = PolicyVersion.objects.get().digest
    assert form_errors(again) == [
        f"shop already has this exact policy text (version {digest[:19]}…)"
    ]
    assert PolicyVersion.objects.count() == 1


def test_an_empty_policy_add_form_is_a_form_error_not_a_server_error(admin_client, shop):
    response = admin_client.post("/admin/quests/policyversion/add/", {})
    assert response.status_code == 200
    assert form_errors(response) == ["This field is required.", "This field is required."]


def test_a_policy_version_is_never_edited_or_deleted(admin_client, shop):
    admin_client.post("/admin/quests/policyversion/add/", {"workspace": shop.pk, "text": POLICY})
    version = PolicyVersion.objects.get()
    url = f"/admin/quests/policyversion/{version.pk}"
    assert admin_client.get(f"{url}/change/").status_code == 200
    assert admin_client.post(f"{url}/change/", {"text": "version: 2"}).status_code == 403
    assert admin_client.get(f"{url}/delete/").status_code == 403
    version.refresh_from_db()
    assert version.text == POLICY


def test_the_admin_proposes_a_version_and_only_a_second_admins_approval_makes_it_current(
    admin_client, shop
):
    admin_client.post("/admin/quests/policyversion/add/", {"workspace": shop.pk, "text": POLICY})
    version = PolicyVersion.objects.get()
    entries = AuditEntry.objects.filter(workspace=shop).count()
    response = admin_client.post(
        "/admin/quests/policyversion/",
        {"action": "propose_current", "index": "0", "_selected_action": [version.pk]},
        follow=True,
    )
    proposal = PolicyProposal.objects.get()
    page = response.content.decode()
    assert (
        f"Policy {version.digest} is proposed as the policy of shop (proposal #{proposal.pk}); "
        'another admin approves it on <a href="/w/shop/policy/">its policy page</a>.' in page
    )
    shop.refresh_from_db()
    assert shop.policy_id is None  # proposed, not current
    assert (proposal.state, proposal.version, proposal.proposed_by.username) == (
        "open",
        version,
        "ann",
    )
    entry = AuditEntry.objects.filter(workspace=shop).order_by("-sequence").first()
    assert AuditEntry.objects.filter(workspace=shop).count() == entries + 1
    assert (entry.actor, entry.action, entry.object) == (
        "person:ann",
        "policy.proposed",
        "workspace:shop",
    )

    # The proposer, a superuser, still cannot approve it; a second admin can.
    approve = f"/w/shop/policy/{proposal.pk}/approve"
    assert admin_client.post(approve).status_code == 403
    get_user_model().objects.create_superuser("bob", "bob@example.com", "battery staple")
    second = admin_client.__class__()
    second.login(username="bob", password="battery staple")
    assert second.post(approve).status_code == 303
    shop.refresh_from_db()
    assert shop.policy_id == version.pk
    out = StringIO()
    call_command("audit", "verify", stdout=out)
    assert out.getvalue().startswith("shop: verified")

    again = admin_client.post(
        "/admin/quests/policyversion/",
        {"action": "propose_current", "index": "0", "_selected_action": [version.pk]},
        follow=True,
    )
    assert "Not proposed: this text already is the current policy of shop" in (
        again.content.decode()
    )
    assert PolicyProposal.objects.count() == 1


def test_the_admin_no_longer_makes_a_version_current_by_itself(admin_client, shop):
    admin_client.post("/admin/quests/policyversion/add/", {"workspace": shop.pk, "text": POLICY})
    version = PolicyVersion.objects.get()
    listing = admin_client.get("/admin/quests/policyversion/").content.decode()
    assert "make_current" not in listing and 'value="propose_current"' in listing
    entries = AuditEntry.objects.count()
    admin_client.post(
        "/admin/quests/policyversion/",
        {"action": "make_current", "index": "0", "_selected_action": [version.pk]},
    )
    shop.refresh_from_db()
    assert shop.policy_id is None
    assert AuditEntry.objects.count() == entries
