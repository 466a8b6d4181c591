"""``manage.py hooks``: register a hook, print the endpoint to give the forge, list them."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from intake.models import Hook
from tests.intake.conftest import deliver, fixture_bytes

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("hooks", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_add_prints_the_endpoint_to_configure_at_the_forge(workspace, monkeypatch):
    monkeypatch.setenv("SHOP_GITHUB_SECRET", "x" * 32)
    out, err = run("add", "shop", "github", "--secret-env", "SHOP_GITHUB_SECRET")
    assert out == "github hook of shop: /hooks/github/shop\n"
    assert err == ""
    hook = Hook.objects.get()
    assert (hook.kind, hook.secret_ref, hook.active) == ("github", "env:SHOP_GITHUB_SECRET", True)


def test_add_with_a_public_url_prints_the_whole_url(workspace, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s" * 32)
    out, _ = run(
        "add", "shop", "forgejo", "--secret-file", str(secret), "--url", "https://e.example/"
    )
    assert out == "forgejo hook of shop: https://e.example/hooks/forgejo/shop\n"
    assert Hook.objects.get().secret_ref == f"file:{secret}"


def test_add_warns_when_this_shell_cannot_read_the_secret(workspace, monkeypatch):
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    _, err = run("add", "shop", "gitea", "--secret-env", "NOT_SET_HERE")
    assert err == (
        "warning: the environment variable NOT_SET_HERE is not set here; "
        "the web process must be able to read it\n"
    )
    assert Hook.objects.count() == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "nowhere", "github", "--secret-env", "X"], "no workspace 'nowhere'"),
        (["add", "shop", "github", "--secret-env", "1BAD"], "a secret reference is env:NAME"),
        (["add", "shop", "github", "--secret-file", "relative/path"], "a secret reference is"),
        (["add", "shop", "gitea", "--generate-token"], "give --secret-env or --secret-file"),
        (["remove", "shop", "gitlab"], "workspace shop has no gitlab hook"),
    ],
)
def test_bad_arguments_are_refused_and_store_nothing(workspace, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert Hook.objects.count() == 0


def test_a_second_hook_of_the_same_forge_is_refused(workspace):
    run("add", "shop", "github", "--secret-env", "A")
    with pytest.raises(CommandError, match="already has a github hook; remove it first"):
        run("add", "shop", "github", "--secret-env", "B")
    assert Hook.objects.get().secret_ref == "env:A"


def test_list_shows_each_hook_its_endpoint_and_its_last_delivery(client, workspace, hooks):
    assert deliver(client, "github", "ping", fixture_bytes("github", "ping")).status_code == 200
    out, _ = run("list", "--url", "https://ephyra.example.com")
    lines = [line.split("\t") for line in out.splitlines()]
    assert [line[:5] for line in lines] == [
        [
            "shop",
            kind,
            f"https://ephyra.example.com/hooks/{kind}/shop",
            "env:EPHYRA_TEST_HOOK_SECRET",
            "active",
        ]
        for kind in ("forgejo", "gitea", "github", "gitlab")
    ]
    assert lines[2][5].startswith("last delivery 20")
    assert lines[0][5] == "no delivery yet"


def test_disable_refuses_deliveries_until_enable(client, workspace, hooks):
    body = fixture_bytes("github", "ping")
    run("disable", "shop", "github")
    assert deliver(client, "github", "ping", body, delivery="a").status_code == 404
    run("enable", "shop", "github")
    assert deliver(client, "github", "ping", body, delivery="b").status_code == 200


def test_remove_keeps_the_deliveries(client, workspace, hooks):
    deliver(client, "github", "ping", fixture_bytes("github", "ping"))
    out, _ = run("remove", "shop", "github")
    assert out == "removed the github hook of shop\n"
    assert workspace.webhook_deliveries.count() == 1


def test_every_change_to_a_hook_at_the_command_line_is_audited(workspace):
    from io import StringIO

    from django.core.management import call_command

    from ledger.models import AuditEntry

    call_command("hooks", "add", "shop", "gitlab", "--generate-token", stdout=StringIO())
    call_command("hooks", "disable", "shop", "gitlab", stdout=StringIO())
    call_command("hooks", "enable", "shop", "gitlab", stdout=StringIO())
    call_command("hooks", "remove", "shop", "gitlab", stdout=StringIO())
    entries = list(AuditEntry.objects.order_by("sequence").values_list("action", "actor"))
    assert [action for action, _ in entries] == [
        "hook.created",
        "hook.disabled",
        "hook.enabled",
        "hook.removed",
    ]
    assert all(actor.startswith("manage.py:") for _, actor in entries)
