"""``manage.py workspace add``: a repository becomes a workspace only on a branch it has."""

import subprocess
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from quests.models import Workspace


@pytest.mark.django_db
def test_a_base_branch_that_does_not_exist_is_refused_with_the_branches_that_do(
    git_repository, settings, tmp_path
):
    settings.DATA_DIR = tmp_path / "data"
    repo = git_repository(branches=("main", "release/1.x"))
    with pytest.raises(CommandError) as refused:
        call_command("workspace", "add", "shop", str(repo), "--base", "develop")
    assert str(refused.value) == (
        f"{repo} has no branch 'develop'; its branches: main, release/1.x"
    )
    assert not Workspace.objects.exists()
    assert not (tmp_path / "data" / "mirrors" / "shop.git").exists()
    # Nothing was left behind: the same slug can be added on a branch that exists.
    out = StringIO()
    call_command("workspace", "add", "shop", str(repo), "--base", "release/1.x", stdout=out)
    assert Workspace.objects.get().base_branch == "release/1.x"


@pytest.mark.django_db
def test_a_repository_without_branches_is_refused(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    empty = tmp_path / "empty"
    subprocess.run(["git", "init", "-q", str(empty)], check=True)
    with pytest.raises(CommandError, match=r"has no branch 'main'; it has no branches$"):
        call_command("workspace", "add", "shop", str(empty))
    assert not Workspace.objects.exists()


@pytest.mark.django_db
def test_a_relative_path_is_kept_as_an_absolute_remote(
    git_repository, settings, tmp_path, monkeypatch
):
    settings.DATA_DIR = tmp_path / "data"
    repo = git_repository()
    monkeypatch.chdir(repo.parent)
    call_command("workspace", "add", "shop", repo.name, stdout=StringIO())
    assert Workspace.objects.get().remote == str(repo)
