"""The walk-through in docs/engine.md, as commands a person types."""

import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from quests.models import Quest, Workspace

pytestmark = pytest.mark.django_db

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)


@pytest.fixture
def source(tmp_path):
    repo = tmp_path / "shop"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "cart.py").write_text("def total(items):\n    return sum(i['price'] for i in items)\n")
    git("add", ".", cwd=repo)
    git(
        "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qm", "cart", cwd=repo
    )
    return repo


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_a_workspace_from_a_local_repository_journals_applied_events(source, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    assert "journals in" in run("workspace", "add", "shop", str(source))
    mirror = Workspace.objects.get(slug="shop").repository
    assert Path(mirror).is_relative_to(tmp_path / "data" / "mirrors")

    lines = run("apply_events", "shop", str(EXAMPLES / "main-line.jsonl")).splitlines()
    assert len(lines) == 16

    log = git("log", "--format=%s", "refs/ephyra/quests/checkout-500", cwd=mirror).stdout
    subjects = log.splitlines()
    assert len(subjects) == 16
    assert subjects[0] == "checkout-500: closed (usage_recorded e016)"
    assert subjects[1] == "checkout-500: watching → closed (watch_clean e015)"
    assert subjects[-1] == "checkout-500: new quest → sensed (signal_sensed e001)"

    Quest.objects.all().delete()
    assert run("repair").startswith(
        "repair: 1 workspaces, 1 quests checked; 1 projections created, 0 updated"
    )
    assert Quest.objects.get(quest_id="checkout-500").state == "closed"


def test_adding_the_same_workspace_twice_is_refused(source, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    run("workspace", "add", "shop", str(source))
    with pytest.raises(CommandError, match="workspace 'shop' already exists"):
        run("workspace", "add", "shop", str(source))


def test_a_repository_that_cannot_be_mirrored_is_refused(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    with pytest.raises(CommandError, match="cannot mirror"):
        run("workspace", "add", "ghost", str(tmp_path / "missing"))
    assert not Workspace.objects.exists()


def test_applying_an_invalid_file_reports_the_refusals(source, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    run("workspace", "add", "shop", str(source))
    with pytest.raises(CommandError, match="1 of 5 events were refused"):
        run("apply_events", "shop", str(EXAMPLES / "invalid-transition.jsonl"))


def test_replay_of_a_journal_reports_that_it_matches(source, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    run("workspace", "add", "shop", str(source))
    run("apply_events", "shop", str(EXAMPLES / "main-line.jsonl"))
    out, err = StringIO(), StringIO()
    call_command("replay", workspace="shop", quest="checkout-500", stdout=out, stderr=err)
    assert len(out.getvalue().splitlines()) == 16
    assert "replayed 16 events: matches the journal" in err.getvalue()


def test_replay_of_an_unknown_quest_is_refused(source, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    run("workspace", "add", "shop", str(source))
    with pytest.raises(CommandError, match="no journal for quest 'nope'"):
        run("replay", "--workspace", "shop", "--quest", "nope")


def test_journals_travel_to_the_source_repository_and_a_conflict_is_refused(
    source, settings, tmp_path
):
    settings.DATA_DIR = tmp_path / "data"
    run("workspace", "add", "shop", str(source))
    run("apply_events", "shop", str(EXAMPLES / "main-line.jsonl"))
    assert run("journals", "push", "shop").startswith(f"pushed to {source}: 1 new")
    head = git("rev-parse", "refs/ephyra/quests/checkout-500", cwd=source).stdout.strip()
    mirror = Workspace.objects.get(slug="shop").repository
    assert head == git("rev-parse", "refs/ephyra/quests/checkout-500", cwd=mirror).stdout.strip()

    # Someone else's journal moves on the remote; ours moves differently: pushing is refused.
    other = git("commit-tree", "-p", head, "-m", "elsewhere", f"{head}^{{tree}}", cwd=source)
    git("update-ref", "refs/ephyra/quests/checkout-500", other.stdout.strip(), cwd=source)
    late = Path(tmp_path / "late.jsonl")
    late.write_text(
        '{"id": "e900", "quest": "checkout-500", "type": "usage_recorded",'
        ' "at": "2026-12-01T00:00:00Z", "source": "runner", "runner_seconds": 3}\n'
    )
    run("apply_events", "shop", str(late))
    with pytest.raises(CommandError, match="push rejected: refs/ephyra/quests/checkout-500"):
        run("journals", "push", "shop")
    remote_head = git("rev-parse", "refs/ephyra/quests/checkout-500", cwd=source).stdout.strip()
    assert remote_head == other.stdout.strip()  # never overwritten
    assert "1 diverged: checkout-500" in run("journals", "fetch", "shop")


def test_a_repository_url_with_a_password_is_refused_and_nothing_is_stored(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    with pytest.raises(CommandError, match="the repository URL carries a password"):
        run("workspace", "add", "shop", "https://bot:hunter2@example.com/shop.git")
    assert not Workspace.objects.exists()
    assert not (tmp_path / "data" / "mirrors").exists()
