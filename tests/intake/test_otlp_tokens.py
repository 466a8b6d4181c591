"""Ingest tokens: shown once, stored as a salted digest, verified in constant time."""

from __future__ import annotations

from io import StringIO

from django.core.management import call_command
from django.db import connection

from intake.otlp.models import IngestToken
from intake.otlp.tokens import bearer, token_create, token_verify


def database_text() -> str:
    """Every value of every table, as text (what a leaked dump would show)."""
    out = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            out += [repr(row) for row in cursor.fetchall()]
    return "\n".join(out)


def test_the_command_prints_a_token_once_that_the_database_never_holds(workspace):
    out = StringIO()
    call_command("ingest_tokens", "add", "shop", "--name", "api", stdout=out)
    token = out.getvalue().splitlines()[1]
    assert len(token) >= 43
    row = IngestToken.objects.get()
    assert row.name == "api" and row.prefix == token[:8]
    assert token not in database_text()
    assert token[8:] not in database_text()
    assert token_verify(token) == row


def test_the_listing_shows_prefixes_and_never_tokens(workspace):
    _, token = token_create(workspace, name="worker")
    out = StringIO()
    call_command("ingest_tokens", "list", stdout=out)
    assert f"shop\t{token[:8]}…\tworker\tactive" in out.getvalue()
    assert token not in out.getvalue()


def test_a_wrong_or_inactive_token_verifies_as_nothing(workspace):
    row, token = token_create(workspace)
    assert token_verify(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert token_verify("") is None and token_verify(None) is None
    IngestToken.objects.filter(pk=row.pk).update(active=False)
    assert token_verify(token) is None


def test_only_a_bearer_header_carries_a_token():
    assert bearer("Bearer abc") == "abc"
    assert bearer("bearer  abc ") == "abc"
    assert bearer("Basic abc") is None
    assert bearer("Bearer ") is None
    assert bearer(None) is None
