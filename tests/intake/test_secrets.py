"""A hook's secret reaches neither the database, nor the journal, nor the log."""

from __future__ import annotations

import json
import logging
from io import StringIO

import pygit2
import pytest
from django.core.management import call_command
from django.db import connection

from ephyra.core.events import parse_event
from intake.hooks.services import hook_create
from intake.models import Hook
from ledger.models import InboundEvent
from quests.engine import quest_apply
from tests.intake.conftest import SECRET, deliver, fixture, fixture_bytes
from tests.telemetry import hidden

pytestmark = pytest.mark.django_db


def database_text() -> str:
    """Every value of every row of every table, as text."""
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            chunks.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(chunks)


def journal_bytes(workspace) -> bytes:
    repo = pygit2.Repository(workspace.repository)
    return b"".join(repo.odb.read(oid)[1] for oid in repo.odb)


def test_no_secret_is_stored_or_logged_while_deliveries_flow(
    client, workspace, hooks, quests, caplog
):
    quests.ready("checkout-500")
    hooks["gitlab"].delete()
    _, token = hook_create(workspace, "gitlab", generate_token=True)
    caplog.set_level(logging.DEBUG)

    assert deliver(client, "github", "push", fixture_bytes("github", "push")).status_code == 202
    assert (
        deliver(client, "github", "push", fixture_bytes("github", "push"), secret="x").status_code
        == 401
    )
    note = fixture_bytes("gitlab", "note")
    assert (
        deliver(client, "gitlab", "Note Hook", note, secret=token, delivery="n-1").status_code
        == 202
    )
    assert (
        deliver(client, "gitlab", "Note Hook", note, secret=SECRET, delivery="n-2").status_code
        == 401
    )
    gitea_push = fixture_bytes("gitea", "push")
    assert deliver(client, "gitea", "push", gitea_push, delivery="g-1").status_code == 202

    stored = database_text()
    assert "env:EPHYRA_TEST_HOOK_SECRET" in stored  # the reference is there, to be sure we looked
    assert SECRET not in stored
    assert token not in stored
    assert SECRET.encode() not in journal_bytes(workspace)
    assert SECRET not in caplog.text and token not in caplog.text


def test_a_generated_gitlab_token_is_shown_once_and_kept_as_a_salted_digest(workspace):
    out = StringIO()
    call_command("hooks", "add", "shop", "gitlab", "--generate-token", stdout=out)
    token = out.getvalue().rsplit(": ", 1)[1].strip()
    hook = Hook.objects.get(kind="gitlab")
    assert len(token) >= 40
    assert hook.secret_ref == "" and hook.token_hash.startswith("sha256$")
    assert token not in database_text()


@pytest.mark.parametrize("kind", ["github", "gitea", "forgejo"])
def test_an_hmac_forge_needs_a_readable_secret_not_a_digest(workspace, kind):
    with pytest.raises(ValueError, match="give --secret-env or --secret-file"):
        hook_create(workspace, kind, generate_token=True)


def test_a_secret_in_a_file_is_read_on_every_delivery(client, workspace, tmp_path):
    secret_file = tmp_path / "github-hook-secret"
    secret_file.write_text(SECRET + "\n")
    hook_create(workspace, "github", secret_ref=f"file:{secret_file}")
    body = fixture_bytes("github", "ping")
    assert deliver(client, "github", "ping", body, delivery="p-1").status_code == 200
    secret_file.write_text("rotated-secret\n")  # rotation needs no restart
    assert deliver(client, "github", "ping", body, delivery="p-2").status_code == 401
    response = deliver(client, "github", "ping", body, delivery="p-3", secret="rotated-secret")
    assert response.status_code == 200
    assert SECRET not in database_text()


def test_a_refusal_logs_nothing_secret_the_request_carried(client, workspace, hooks, caplog):
    token = "ghp_r2d4x9qk7lmn3pv8st1wy6zb0cf5hj2km4nq"  # the content type is read lower-cased
    caplog.set_level(logging.DEBUG)
    body = fixture_bytes("github", "push")
    response = deliver(client, "github", "push", body, content_type=f"text/{token}")
    assert response.status_code == 415
    assert "refused: unsupported content type" in caplog.text
    assert token not in caplog.text
    assert token not in database_text()


def test_an_event_name_shaped_like_a_token_is_stored_and_logged_redacted(
    client, workspace, hooks, caplog
):
    token = "ghp_R2d4x9Qk7LmN3pV8sT1wY6zB0cF5hJ2kM4nQ"
    caplog.set_level(logging.DEBUG)
    response = deliver(client, "github", token, {"zen": "Keep it logically awesome."})
    assert response.status_code == 200
    assert response.json() == {
        "status": "ignored",
        "reason": "GitHub event '[redacted:github-token]' is not one Ephyra acts on",
    }
    assert token not in database_text() and token not in caplog.text


def test_a_comment_carrying_secrets_hidden_by_invisible_characters_or_delimiters_stores_none(
    client, workspace, hooks, quests, caplog
):
    # issue 13, defect 16: the inbound event, its journal event.json, the delivery row, the log
    caplog.set_level(logging.DEBUG)
    quests.ready("checkout-500")
    comment = fixture("github", "issue_comment")
    comment["comment"]["body"] = "It fails with:\n" + "\n".join(hidden.carriers().values())
    response = deliver(client, "github", "issue_comment", comment)
    assert (response.status_code, response.json()) == (202, {"status": "accepted", "events": 1})

    row = InboundEvent.objects.get()
    for placeholder in hidden.PLACEHOLDERS:  # the secrets were there, and went
        assert placeholder in row.payload["body"]
    decision = quest_apply(workspace, parse_event(row.payload)).applied.decision
    assert decision.accepted and decision.quest.comments == 1

    journal = journal_bytes(workspace).decode("utf-8", "replace")
    assert "It fails with:" in journal  # the journal holds the comment, redacted
    stored = [
        ("the inbound event", json.dumps(row.payload, ensure_ascii=False)),
        ("the database", database_text()),  # (as repr: an invisible character shows escaped)
        ("the journal", journal),
        ("the log", caplog.text),
    ]
    assert hidden.leaks(stored) == []
