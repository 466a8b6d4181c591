"""``manage.py repair`` on a workspace a worker serves: the worker repairs it and the command
prints its report; a worker that does not answer is a failure that says why."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger.inbound import submit_event
from ledger.lease import lease_acquire
from quests.models import Quest
from tests.audit_tampering import erase_audit_log
from tests.core.story import Story
from tests.waiting import wait_until
from worker.loop import Worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _flushable():
    yield
    erase_audit_log()  # the append-only audit rows would refuse the flush after the test


def test_a_served_workspace_is_repaired_by_its_worker(workspace, settings):
    settings.EPHYRA_POLL_MS = 20
    submit_event(workspace, Story("q1").signal(), source="test")
    worker = Worker(owner="serving-worker")
    worker.start()
    try:
        assert wait_until(lambda: Quest.objects.filter(state="triaged").exists(), 30)
        Quest.objects.all().delete()  # the projection is lost; the journal is not
        out = StringIO()
        call_command("repair", "--list", stdout=out)
    finally:
        worker.stop()
    lines = out.getvalue().splitlines()
    assert lines[0] == "shop: repaired by worker serving-worker"
    assert lines[1].startswith("repair: 1 workspaces, 0 quests checked; 1 projections created")
    assert "  created: q1" in lines
    assert Quest.objects.get(quest_id="q1").state == "triaged"


def test_a_worker_that_does_not_answer_fails_the_command_with_the_reason(workspace):
    assert lease_acquire(workspace.pk, "stuck-worker") is not None  # holds it, answers nothing
    with pytest.raises(CommandError) as raised:
        call_command("repair", "--wait", "0.2", stdout=StringIO())
    assert raised.value.returncode == 1
    assert "shop: worker stuck-worker serves it and did not repair it within 0.2 s" in str(
        raised.value
    )
