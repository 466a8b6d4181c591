"""The workspaces pages through Django's test client: who may see and do what, the health of a
workspace, adding one, and its ingest tokens and forge hooks, whose secrets are shown once and
never stored in the database."""

from __future__ import annotations

import re
import stat
import subprocess
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from intake.models import Hook
from intake.otlp.models import IngestToken
from intake.otlp.tokens import token_create
from ledger.lease import lease_acquire
from ledger.models import AuditEntry, Operation
from quests.models import Workspace
from quests.roles import Role
from tests.inbox.test_policy_pages import as_, text_of
from tests.intake.conftest import deliver, fixture_bytes
from tests.intake.test_otlp_refusals import PROTOBUF, error_log
from tests.intake.test_otlp_tokens import database_text
from tests.quests.conftest import drive, person

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(workspace, other_workspace):
    return {
        "admin": person("ann", shop=[Role.ADMIN]),
        "bob": person("bob", shop=[Role.ADMIN]),
        "reviewer": person("rita", shop=[Role.REVIEWER]),
        "staff": person("sam", shop=[Role.STAFF]),
        "other admin": person("otto", other=[Role.ADMIN]),
    }


@pytest.fixture
def repository(tmp_path) -> Path:
    """A real Git repository with one commit on main and on release."""
    path = tmp_path / "web"
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    who = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(
        ["git", "-C", str(path), *who, "commit", "-q", "--allow-empty", "-m", "init"], check=True
    )
    subprocess.run(["git", "-C", str(path), "branch", "release"], check=True)
    return path


@pytest.fixture
def data_dir(settings, tmp_path) -> Path:
    settings.DATA_DIR = tmp_path / "data"
    return settings.DATA_DIR


def page(slug: str = "shop") -> str:
    return reverse("inbox:workspace", args=[slug])


def key_of(html: str, action: str) -> str:
    """The one-time key of the form posting to ``action``."""
    start = html.index(f'action="{action}"')
    return re.search(r'name="key" value="([0-9a-f]{32})"', html[start:]).group(1)


def make_token(client: Client, name: str = "checkout"):
    url = reverse("inbox:token_create", args=["shop"])
    key = key_of(client.get(page()).content.decode(), url)
    return client.post(url, {"name": name, "key": key})


def register_hook(client: Client, kind: str):
    url = reverse("inbox:hook_create", args=["shop"])
    key = key_of(client.get(page()).content.decode(), url)
    return client.post(url, {"kind": kind, "key": key})


def state() -> tuple:
    return (
        list(Workspace.objects.order_by("slug").values_list("slug", flat=True)),
        list(IngestToken.objects.order_by("pk").values_list("pk", "active")),
        list(Hook.objects.order_by("pk").values_list("kind", "active")),
        AuditEntry.objects.count(),
    )


def audit_actions(workspace) -> list[tuple[str, str]]:
    return list(
        AuditEntry.objects.filter(workspace=workspace)
        .order_by("sequence")
        .values_list("actor", "action")
    )


# --- who may -------------------------------------------------------------------------------


def requests_for(token: IngestToken) -> dict[str, tuple]:
    key = uuid.uuid4().hex
    return {
        "the page": ("get", page(), {}),
        "make a token": ("post", reverse("inbox:token_create", args=["shop"]), {"key": key}),
        "revoke a token": (
            "post",
            reverse("inbox:token_revoke", args=["shop", token.pk]),
            {},
        ),
        "register a hook": (
            "post",
            reverse("inbox:hook_create", args=["shop"]),
            {"kind": "gitlab", "key": key},
        ),
        "disable a hook": (
            "post",
            reverse("inbox:hook_change", args=["shop", "github", "disable"]),
            {},
        ),
        "remove a hook": (
            "post",
            reverse("inbox:hook_change", args=["shop", "github", "remove"]),
            {},
        ),
        "add a workspace": (
            "post",
            reverse("inbox:workspace_add"),
            {"slug": "new", "source": "/nowhere", "base_branch": "main"},
        ),
    }


@pytest.mark.parametrize(
    "request_name",
    [
        "the page",
        "make a token",
        "revoke a token",
        "register a hook",
        "disable a hook",
        "remove a hook",
        "add a workspace",
    ],
)
@pytest.mark.parametrize(
    ("who", "status"),
    [("anonymous", 302), ("reviewer", 403), ("staff", 403), ("other admin", 404)],
)
def test_only_the_workspaces_admins_reach_its_page_and_actions(
    workspace, people, monkeypatch, who, status, request_name
):
    monkeypatch.setenv("SHOP_SECRET", "s" * 32)
    from intake.hooks.services import hook_create

    hook_create(workspace, "github", secret_ref="env:SHOP_SECRET")
    token, _ = token_create(workspace, name="api")
    method, url, data = requests_for(token)[request_name]
    if request_name == "add a workspace" and who != "anonymous":
        status = 403  # nobody here may add workspaces: no superuser, no permission
    before = state()
    response = getattr(as_(people.get(who)), method)(url, data)
    assert response.status_code == status
    if status == 302:
        assert response["Location"].startswith(reverse("inbox:login"))
    assert state() == before


@pytest.mark.parametrize("who", ["admin", "reviewer", "staff", "other admin"])
def test_the_list_answers_anyone_logged_in_with_their_own_workspaces(workspace, people, who):
    response = as_(people[who]).get(reverse("inbox:workspaces"))
    assert response.status_code == 200
    body = response.content.decode()
    assert (page("shop") in body) == (who == "admin")  # the manage link: admins only
    assert ("shop" in text_of(response)) == (who != "other admin")
    assert ('id="add-title"' in body) is False  # none of them may add a workspace
    assert Client().get(reverse("inbox:workspaces")).status_code == 302


def test_an_admin_reaches_the_page_and_each_action_with_its_status(workspace, people, data_dir):
    client = as_(people["admin"])
    assert client.get(page()).status_code == 200
    made = make_token(client)
    assert (made.status_code, made["Cache-Control"]) == (201, "no-store")
    token = IngestToken.objects.get()
    revoke = client.post(reverse("inbox:token_revoke", args=["shop", token.pk]))
    assert (revoke.status_code, revoke["Location"]) == (303, page())
    assert register_hook(client, "github").status_code == 201
    for change in ("disable", "enable", "remove"):
        url = reverse("inbox:hook_change", args=["shop", "github", change])
        assert client.post(url).status_code == 303
    assert (
        client.post(reverse("inbox:hook_change", args=["shop", "github", "remove"])).status_code
        == 404
    )
    assert client.post(reverse("inbox:token_revoke", args=["shop", 999_999])).status_code == 404
    assert client.get(reverse("inbox:token_create", args=["shop"])).status_code == 405


def test_every_form_carries_a_csrf_token_and_a_post_without_one_is_refused(workspace, people):
    client = as_(people["admin"])
    token_create(workspace, name="api")
    body = client.get(page()).content.decode()
    forms = re.findall(r'<form method="post".*?</form>', body, re.S)
    assert len(forms) >= 3
    assert all("csrfmiddlewaretoken" in form for form in forms)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(people["admin"])
    before = state()
    answer = strict.post(reverse("inbox:token_create", args=["shop"]), {"key": uuid.uuid4().hex})
    assert answer.status_code == 403
    assert state() == before


# --- health --------------------------------------------------------------------------------


def test_the_list_and_the_page_show_each_workspaces_health(
    client, workspace, other_workspace, people
):
    lease_acquire(workspace.pk, "host-a:1:live")
    lease_acquire(other_workspace.pk, "host-b:2:gone", now=timezone.now() - timedelta(hours=1))
    drive(workspace, "q1", "hypothesised")  # three pending operations
    first = Operation.objects.filter(workspace=workspace).order_by("pk").first()
    Operation.objects.filter(pk=first.pk).update(state=Operation.State.AMBIGUOUS)
    _, token = token_create(workspace, name="api")
    export = client.post(
        "/v1/logs",
        data=error_log(),
        content_type=PROTOBUF,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert export.status_code == 200  # a signal, and its event waiting for the worker

    both = person("boss", shop=[Role.ADMIN], other=[Role.STAFF])
    listing = as_(both).get(reverse("inbox:workspaces"))
    rows = dict(
        (re.sub(r"<[^>]+>", " ", row).split()[0], " ".join(re.sub(r"<[^>]+>", " ", row).split()))
        for row in re.findall(r"<tr>(.*?)</tr>", listing.content.decode(), re.S)[1:]
    )
    assert rows["shop"].startswith("shop Shop admin live host-a:1:live heartbeat")
    assert "2 1 ambiguous 1" in rows["shop"]  # pending, ambiguous, waiting events
    assert "default" in rows["shop"]
    assert rows["other"].startswith("other Other staff not live host-b:2:gone heartbeat 1")
    assert "0 0 0 none yet default" in rows["other"]

    words = text_of(as_(both).get(page()))
    assert "Worker live host-a:1:live" in words
    assert "Pending operations 2 Ambiguous operations 1 ambiguous" in words
    assert "Events waiting for the worker 1" in words
    assert "Last signal (OTLP) " + timezone.now().strftime("%Y-%m-%d") in words
    assert "Base branch main" in words


def test_the_roles_are_listed_read_only(workspace, people):
    words = text_of(as_(people["admin"]).get(page()))
    assert "Admins ann, bob Reviewers rita Staff sam" in words
    assert "otto" not in words
    assert "manage.py roles grant|revoke USER shop ROLE" in words


# --- adding a workspace --------------------------------------------------------------------


def test_a_superuser_adds_a_workspace_through_the_same_checks_as_the_command(
    repository, data_dir, people
):
    root = person("root")
    root.is_superuser = True
    root.save()
    client = as_(root)
    listing = client.get(reverse("inbox:workspaces")).content.decode()
    assert 'id="add-title"' in listing
    repo = repository
    refused = client.post(
        reverse("inbox:workspace_add"),
        {"slug": "web", "source": str(repo), "base_branch": "develop"},
    )
    assert refused.status_code == 400
    assert f"Not added: {repo} has no branch 'develop'; its branches: main, release" in text_of(
        refused
    )
    assert not Workspace.objects.filter(slug="web").exists()
    assert not (data_dir / "mirrors" / "web.git").exists()

    added = client.post(
        reverse("inbox:workspace_add"),
        {"slug": "web", "source": str(repo), "base_branch": "release", "name": "The web"},
    )
    assert (added.status_code, added["Location"]) == (303, page("web"))
    web = Workspace.objects.get(slug="web")
    assert (web.name, web.base_branch, web.remote) == ("The web", "release", str(repo))
    assert (Path(web.repository) / "refs").is_dir()
    assert audit_actions(web) == [("person:root", "workspace.created")]
    assert client.get(page("web")).status_code == 200


def test_the_add_workspace_permission_is_enough_and_makes_the_creator_its_admin(
    repository, data_dir, people
):
    maker = people["reviewer"]
    maker.user_permissions.add(Permission.objects.get(codename="add_workspace"))
    client = as_(maker)
    assert 'id="add-title"' in client.get(reverse("inbox:workspaces")).content.decode()
    repo = repository
    answer = client.post(
        reverse("inbox:workspace_add"), {"slug": "web", "source": str(repo), "base_branch": "main"}
    )
    assert answer.status_code == 303
    assert client.get(page("web")).status_code == 200  # its admin now
    assert "Admins rita" in text_of(client.get(page("web")))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"slug": "shop", "source": "/x", "base_branch": "main"},
            "workspace 'shop' already exists",
        ),
        (
            {
                "slug": "web",
                "source": "https://bot:hunter2@example.com/x.git",
                "base_branch": "main",
            },
            "the repository URL carries a password",
        ),
        (
            {"slug": "web", "source": "--upload-pack=touch /tmp/x", "base_branch": "main"},
            "a repository path or URL does not start with '-'",
        ),
        ({"slug": "not a slug", "source": "/x", "base_branch": "main"}, "Enter a valid “slug”"),
    ],
)
def test_a_refused_workspace_says_why_and_leaves_nothing(workspace, data_dir, data, message):
    root = person("root")
    root.is_superuser = True
    root.save()
    before = state()
    answer = as_(root).post(reverse("inbox:workspace_add"), data)
    assert answer.status_code == 400
    assert message in text_of(answer)
    assert state() == before
    assert not (data_dir / "mirrors" / "web.git").exists()


# --- ingest tokens -------------------------------------------------------------------------


def test_a_token_is_shown_once_and_authenticates_an_otlp_export(workspace, people):
    client = as_(people["admin"])
    made = make_token(client, "checkout")
    html = made.content.decode()
    token = re.search(r'id="new-token" class="mono wide" readonly value="([^"]+)"', html).group(1)
    assert len(token) >= 43
    assert f'OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer {token}"' in html.replace(
        "&quot;", '"'
    )
    row = IngestToken.objects.get()
    assert (row.name, row.prefix, row.active) == ("checkout", token[:8], True)

    again = client.get(page()).content.decode()
    assert token not in again and token[8:] not in again
    assert f"{token[:8]}…" in again
    assert token not in database_text() and token[8:] not in database_text()
    assert audit_actions(workspace) == [("person:ann", "ingest_token.created")]

    export = Client().post(
        "/v1/logs",
        data=error_log(),
        content_type=PROTOBUF,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert export.status_code == 200


def test_a_resubmitted_token_form_makes_no_second_token(workspace, people):
    client = as_(people["admin"])
    url = reverse("inbox:token_create", args=["shop"])
    key = key_of(client.get(page()).content.decode(), url)
    assert client.post(url, {"name": "a", "key": key}).status_code == 201
    again = client.post(url, {"name": "a", "key": key}, follow=True)
    assert again.redirect_chain == [(page(), 303)]
    assert "Not made: this form was already sent once." in text_of(again)
    assert IngestToken.objects.count() == 1


def test_a_revoked_token_is_refused_by_the_receiver(workspace, people):
    client = as_(people["admin"])
    row, token = token_create(workspace, name="old")
    answer = client.post(reverse("inbox:token_revoke", args=["shop", row.pk]), follow=True)
    assert f"Revoked the token {row.prefix}…" in text_of(answer)
    assert "revoked" in text_of(answer)
    export = Client().post(
        "/v1/logs",
        data=error_log(),
        content_type=PROTOBUF,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert export.status_code == 401
    twice = client.post(reverse("inbox:token_revoke", args=["shop", row.pk]), follow=True)
    assert f"Not revoked: the token {row.prefix}… was already revoked." in text_of(twice)
    assert audit_actions(workspace) == [("person:ann", "ingest_token.revoked")]


# --- forge hooks ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["github", "gitea", "forgejo"])
def test_a_generated_hook_secret_lives_in_a_private_file_and_verifies_a_signed_delivery(
    workspace, people, data_dir, kind
):
    client = as_(people["admin"])
    made = register_hook(client, kind)
    assert (made.status_code, made["Cache-Control"]) == (201, "no-store")
    html = made.content.decode()
    secret = re.search(r'id="new-hook-secret" class="mono wide" readonly value="([^"]+)"', html)[1]
    assert f'value="http://testserver/hooks/{kind}/shop"' in html

    path = data_dir / "secrets" / f"shop-{kind}.secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text().strip() == secret
    hook = Hook.objects.get()
    assert (hook.kind, hook.secret_ref, hook.token_hash) == (kind, f"file:{path.resolve()}", "")
    assert secret not in database_text() and secret[4:] not in database_text()

    body = fixture_bytes("gitea" if kind == "forgejo" else kind, "push")
    answer = deliver(Client(), kind, "push", body, secret=secret)
    assert answer.status_code == 200, answer.content
    forged = deliver(Client(), kind, "push", body, secret="not-" + secret, delivery="d-2")
    assert forged.status_code == 401

    later = client.get(page()).content.decode()
    assert secret not in later
    assert f"starts with {secret[:4]}…" in later and f"file:{path.resolve()}" in later
    assert audit_actions(workspace) == [("person:ann", "hook.created")]


def test_a_gitlab_hook_gets_a_generated_token_kept_only_as_a_digest(workspace, people, data_dir):
    made = register_hook(as_(people["admin"]), "gitlab")
    html = made.content.decode()
    token = re.search(r'id="new-hook-secret" class="mono wide" readonly value="([^"]+)"', html)[1]
    assert "Secret token" in html
    hook = Hook.objects.get()
    assert hook.secret_ref == "" and hook.token_hash.startswith("sha256$")
    assert token not in database_text()
    assert not (data_dir / "secrets").exists()
    answer = deliver(Client(), "gitlab", "Push Hook", fixture_bytes("gitlab", "push"), secret=token)
    assert answer.status_code == 200, answer.content


def test_a_hook_is_disabled_enabled_and_removed_with_its_generated_secret(
    workspace, people, data_dir, django_capture_on_commit_callbacks
):
    client = as_(people["admin"])
    html = register_hook(client, "github").content.decode()
    secret = re.search(r'id="new-hook-secret" class="mono wide" readonly value="([^"]+)"', html)[1]
    body = fixture_bytes("github", "ping")

    client.post(reverse("inbox:hook_change", args=["shop", "github", "disable"]))
    assert deliver(Client(), "github", "ping", body, secret=secret).status_code == 404
    twice = client.post(
        reverse("inbox:hook_change", args=["shop", "github", "disable"]), follow=True
    )
    assert "Not done: the github hook of shop already is disabled." in text_of(twice)
    client.post(reverse("inbox:hook_change", args=["shop", "github", "enable"]))
    assert (
        deliver(Client(), "github", "ping", body, secret=secret, delivery="d-2").status_code == 200
    )

    path = data_dir / "secrets" / "shop-github.secret"
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("inbox:hook_change", args=["shop", "github", "remove"]))
    assert not Hook.objects.exists()
    assert not path.exists()
    assert [action for _, action in audit_actions(workspace)] == [
        "hook.created",
        "hook.disabled",
        "hook.enabled",
        "hook.removed",
    ]


def test_a_second_hook_of_a_kind_is_refused_and_the_first_secret_stays(workspace, people, data_dir):
    client = as_(people["admin"])
    register_hook(client, "gitea")
    path = data_dir / "secrets" / "shop-gitea.secret"
    first = path.read_text()
    url = reverse("inbox:hook_create", args=["shop"])
    # The page no longer offers Gitea; a forged form is refused.
    assert 'value="gitea"' not in client.get(page()).content.decode()
    answer = client.post(url, {"kind": "gitea", "key": uuid.uuid4().hex}, follow=True)
    assert "Not registered: workspace shop already has a gitea hook; remove it first." in (
        text_of(answer)
    )
    assert path.read_text() == first
    assert sorted(p.name for p in path.parent.iterdir()) == ["shop-gitea.secret"]
    assert Hook.objects.count() == 1


def test_a_hook_whose_secret_cannot_be_read_says_so(workspace, people, monkeypatch):
    from intake.hooks.services import hook_create

    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    hook_create(workspace, "gitea", secret_ref="env:NOT_SET_HERE")
    words = text_of(as_(people["admin"]).get(page()))
    assert "cannot be read: the environment variable NOT_SET_HERE is not set" in words


# --- cost ----------------------------------------------------------------------------------


def queries_for(client, url) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_the_pages_cost_the_same_queries_for_few_tokens_hooks_and_workspaces_or_many(
    workspace, other_workspace, people, monkeypatch, tmp_path
):
    from intake.hooks.services import hook_create

    monkeypatch.setenv("SHOP_SECRET", "s" * 32)
    boss = person("boss", shop=[Role.ADMIN], other=[Role.ADMIN])
    client = as_(boss)
    token_create(workspace)
    hook_create(workspace, "github", secret_ref="env:SHOP_SECRET")
    few_page = queries_for(client, page())
    few_list = queries_for(client, reverse("inbox:workspaces"))
    for n in range(8):
        token_create(workspace, name=f"t{n}")
    for kind in ("gitea", "forgejo"):
        hook_create(workspace, kind, secret_ref="env:SHOP_SECRET")
    for n in range(3):
        extra = Workspace.objects.create(
            slug=f"w{n}", name=f"W{n}", repository=str(tmp_path / f"w{n}")
        )
        person(f"p{n}", **{extra.slug: [Role.STAFF]})
        boss.groups.add(*person(f"q{n}", **{extra.slug: [Role.ADMIN]}).groups.all())
    assert queries_for(client, page()) == few_page
    assert queries_for(client, reverse("inbox:workspaces")) == few_list
    assert few_page <= 12 and few_list <= 10
