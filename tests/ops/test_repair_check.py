"""``manage.py repair --check``: what a repair would change, with nothing written."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from journal.store import Journal
from ledger.models import AuditEntry
from quests.engine import quest_apply
from quests.models import Quest, Workspace
from tests.core.story import Story


@pytest.fixture
def workspace(tmp_path, db):
    Journal.init(tmp_path / "mirror.git", bare=True)
    return Workspace.objects.create(
        slug="shop", name="Shop", repository=str(tmp_path / "mirror.git")
    )


def test_check_says_a_lost_projection_would_be_rebuilt_and_writes_nothing(workspace):
    quest_apply(workspace, Story("q1").signal())
    Quest.objects.filter(workspace=workspace).delete()  # the database lost the row
    audited = AuditEntry.objects.count()
    out = io.StringIO()

    with pytest.raises(CommandError, match="the database is behind the journals"):
        call_command("repair", "--check", "--list", stdout=out)

    assert "1 projections created" in out.getvalue() and "projection: q1" in out.getvalue()
    assert "checked only: nothing was written" in out.getvalue()
    assert not Quest.objects.filter(workspace=workspace).exists()
    assert AuditEntry.objects.count() == audited


def test_check_of_a_consistent_install_says_nothing_would_change(workspace):
    quest_apply(workspace, Story("q1").signal())
    out = io.StringIO()
    call_command("repair", "--check", stdout=out)
    assert "0 projections created, 0 updated, 0 ledger operations restored" in out.getvalue()
