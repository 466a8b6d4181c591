"""Journal replication, in one process: the worker pushes the journals it moved to the
workspace's journal remote after each group, shows what is unconfirmed when the push fails,
and on taking a workspace over fetches the remote's journals first and refuses a journal that
is behind the database (nothing rewritten)."""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from journal.store import Journal
from ledger.inbound import submit_event
from ledger.models import InboundEvent, JournalReplica, Lease
from quests.models import Quest, Workspace
from tests.core.story import Story
from worker.loop import Worker


def remote_heads(path: Path) -> dict[str, str]:
    out = subprocess.run(
        ["git", "--git-dir", str(path), "for-each-ref", "--format=%(refname) %(objectname)"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return dict(line.split() for line in out.splitlines() if line.startswith("refs/ephyra/"))


def local_heads(ws: Workspace) -> dict[str, str]:
    return remote_heads(Path(ws.repository))


@pytest.fixture
def replicated(tmp_path, db):
    """A workspace with a journal remote: a bare repository of its own."""
    Journal.init(tmp_path / "mirror.git", bare=True)
    Journal.init(tmp_path / "remote.git", bare=True)
    return Workspace.objects.create(
        slug="shop",
        name="Shop",
        repository=str(tmp_path / "mirror.git"),
        journal_remote=str(tmp_path / "remote.git"),
    )


def test_after_a_group_the_worker_pushes_the_journals_it_moved_and_records_them_confirmed(
    replicated, tmp_path
):
    submit_event(replicated, Story("q1").signal(), source="test")
    submit_event(replicated, Story("q2").signal(), source="test")
    Worker(owner="w1").step()

    assert Quest.objects.filter(workspace=replicated).count() == 2
    local = local_heads(replicated)
    assert "refs/ephyra/quests/q1" in local and "refs/ephyra/quests/q2" in local
    assert remote_heads(tmp_path / "remote.git") == local  # audit anchors too, if any
    replica = JournalReplica.objects.get(workspace=replicated)
    assert (replica.unconfirmed, replica.failures, replica.last_error) == (0, 0, "")
    assert replica.last_ok_at is not None
    out = io.StringIO()
    call_command("ledger", "status", stdout=out)
    assert "journal push: 0 transitions unconfirmed, last push ok at" in out.getvalue()


def test_a_push_that_keeps_failing_is_counted_logged_and_shown_as_unconfirmed_transitions(
    replicated, tmp_path, caplog
):
    replicated.journal_remote = str(tmp_path / "nowhere.git")  # no repository there
    replicated.save()
    submit_event(replicated, Story("q1").signal(), source="test")
    worker = Worker(owner="w1")
    with caplog.at_level(logging.ERROR, logger="worker.replication"):
        worker.step()
        worker.replicator.pause_until.clear()  # the next attempt, without waiting its pause
        worker.replicate(worker.fences[replicated.pk], moved=True)

    replica = JournalReplica.objects.get(workspace=replicated)
    git = ["git", "--git-dir", replicated.repository, "rev-list", "--count"]
    commits = sum(
        int(subprocess.run([*git, ref], capture_output=True, text=True, check=True).stdout)
        for ref in local_heads(replicated)
    )
    assert replica.unconfirmed == commits > 0
    assert replica.failures == 2 and replica.last_ok_at is None
    assert "nowhere.git" in replica.last_error and replica.unconfirmed_since is not None
    failed = [r for r in caplog.records if "journal push to" in r.getMessage()]
    assert len(failed) == 2 and all(r.levelno == logging.ERROR for r in failed)
    assert "(2 in a row)" in failed[1].getMessage()
    out = io.StringIO()
    call_command("ledger", "status", "--workspace", "shop", stdout=out)
    text = out.getvalue()
    assert f"journal push: {commits} transitions unconfirmed (lag " in text
    assert "no push confirmed yet, 2 failures in a row, last error at" in text


def test_a_worker_on_a_new_host_fetches_the_journals_before_it_serves(replicated, tmp_path):
    submit_event(replicated, Story("q1").signal(), source="test")
    first = Worker(owner="host1")
    first.step()
    first.release()
    heads = local_heads(replicated)
    # Host 2: the same database, its own disk: the mirror is not there.
    shutil.rmtree(replicated.repository)
    submit_event(replicated, Story("q2").signal(), source="test")

    second = Worker(owner="host2")
    second.step()

    assert Path(replicated.repository).exists()
    moved = local_heads(replicated)
    assert moved["refs/ephyra/quests/q1"] == heads["refs/ephyra/quests/q1"]  # fetched, not redone
    assert "refs/ephyra/quests/q2" in moved
    assert replicated.pk in second.fences
    assert not InboundEvent.objects.filter(workspace=replicated, state="pending").exists()
    assert JournalReplica.objects.get(workspace=replicated).blocked == ""


def test_a_journal_behind_the_database_after_the_fetch_is_refused_and_nothing_is_rewritten(
    replicated, tmp_path, caplog
):
    replicated.journal_remote = str(tmp_path / "elsewhere.git")  # host 1 never pushed here
    replicated.save()
    Journal.init(tmp_path / "elsewhere.git", bare=True)
    submit_event(replicated, Story("q1").signal(), source="test")
    first = Worker(owner="host1")
    first.replicator.pause_until[replicated.pk] = float("inf")  # its pushes never happen
    first.step()
    first.release()
    rows = list(Quest.objects.filter(workspace=replicated).values("quest_id", "journal_head"))
    shutil.rmtree(replicated.repository)  # host 1's disk is lost
    submit_event(replicated, Story("q2").signal(), source="test")

    second = Worker(owner="host2")
    with caplog.at_level(logging.ERROR, logger="worker.replication"):
        second.step()

    assert replicated.pk not in second.fences
    assert (
        list(Quest.objects.filter(workspace=replicated).values("quest_id", "journal_head")) == rows
    )
    assert InboundEvent.objects.filter(workspace=replicated, state="pending").count() == 1
    blocked = JournalReplica.objects.get(workspace=replicated).blocked
    assert "the journal is behind the database" in blocked and "quest q1 has no journal" in blocked
    assert any("the journal is behind the database" in r.getMessage() for r in caplog.records)
    assert Lease.objects.get(pk=replicated.pk).owner == ""  # handed back for a complete host
    out = io.StringIO()
    call_command("ledger", "status", stdout=out)
    assert "REFUSED: workspace shop: the journal is behind the database" in out.getvalue()


def test_a_journal_remote_with_a_password_is_refused_and_nothing_is_stored(replicated):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as refused:
        call_command("workspace", "journal-remote", "shop", "https://ann:s3cret@git.example/j.git")
    assert "carries a password" in str(refused.value) and "s3cret" not in str(refused.value)
    replicated.refresh_from_db()
    assert replicated.journal_remote.endswith("remote.git")


def test_naming_a_journal_remote_is_audited(replicated, tmp_path):
    from ledger.models import AuditEntry

    out = io.StringIO()
    call_command("workspace", "journal-remote", "shop", str(tmp_path / "other.git"), stdout=out)
    assert f"journals pushed to {tmp_path / 'other.git'}" in out.getvalue()
    entry = AuditEntry.objects.get(workspace=replicated, action="workspace.journal_remote")
    assert entry.payload["to"] == str(tmp_path / "other.git")


def test_the_workspace_page_shows_unconfirmed_transitions_and_the_last_push_error(
    replicated, tmp_path, client
):
    from django.urls import reverse

    from quests.roles import Role
    from tests.quests.conftest import person

    replicated.journal_remote = str(tmp_path / "nowhere.git")
    replicated.save()
    submit_event(replicated, Story("q1").signal(), source="test")
    Worker(owner="w1").step()
    client.force_login(person("ann", shop=[Role.ADMIN]))

    html = client.get(reverse("inbox:workspace", args=["shop"])).content.decode()

    replica = JournalReplica.objects.get(workspace=replicated)
    assert f"{replica.unconfirmed} transitions unconfirmed" in html and replica.unconfirmed > 0
    assert "no push confirmed yet, 1 failure in a row" in html
    assert "nowhere.git" in html and "last error at" in html


def test_in_async_mode_the_worker_pushes_after_each_pass(replicated, tmp_path, settings):
    settings.EPHYRA_JOURNAL_PUSH = "async"
    submit_event(replicated, Story("q1").signal(), source="test")
    Worker(owner="w1").step()
    assert remote_heads(tmp_path / "remote.git") == local_heads(replicated)
    assert JournalReplica.objects.get(workspace=replicated).unconfirmed == 0


def test_an_unknown_push_mode_stops_the_process_with_the_setting_named():
    import os
    import sys

    env = {**os.environ, "EPHYRA_JOURNAL_PUSH": "sometimes", "SECRET_KEY": "x"}
    done = subprocess.run(
        [sys.executable, "-c", "import ephyra.settings"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "EPHYRA_JOURNAL_PUSH must be sync or async, got 'sometimes'" in done.stderr


def test_the_push_lag_metric_grows_while_pushes_fail_and_is_0_once_they_work(replicated, tmp_path):
    from datetime import timedelta

    from django.utils import timezone

    from ops.metrics import journal_push_lag

    good = replicated.journal_remote
    replicated.journal_remote = str(tmp_path / "nowhere.git")
    replicated.save()
    submit_event(replicated, Story("q1").signal(), source="test")
    worker = Worker(owner="w1")
    worker.step()
    later = timezone.now() + timedelta(seconds=90)
    [family] = journal_push_lag({replicated.pk: "shop"}, later)
    [sample] = family.samples
    assert sample.labels == {"workspace": "shop"} and sample.value >= 90

    replicated.journal_remote = good
    replicated.save()
    worker.replicator.pause_until.clear()
    worker.replicate(worker.fences[replicated.pk], moved=True)
    [family] = journal_push_lag({replicated.pk: "shop"}, later)
    assert [s.value for s in family.samples] == [0.0]
    assert remote_heads(Path(good)) == local_heads(replicated)
