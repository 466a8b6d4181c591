"""A quest revision's worktree: made from the workspace's bare mirror on its own branch,
idempotent, rebuilt after a crash, removed without trace."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ephyra.runner import (
    WorktreeError,
    prepare_worktree,
    remove_quest_worktrees,
    remove_worktree,
)
from ephyra.runner.worktrees import listed_worktrees

IDENTITY = ("-c", "user.name=Dev", "-c", "user.email=dev@example.com")


def git(where: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(where), *IDENTITY, *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def history(tmp_path) -> tuple[Path, list[str]]:
    """A bare mirror of a repository of three commits; the commits, oldest first."""
    source = tmp_path / "source"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    commits = []
    for n in range(3):
        (source / "app.py").write_text(f"VERSION = {n}\n")
        (source / ".gitignore").write_text(".venv/\n")
        git(source, "add", "-A")
        git(source, "commit", "-q", "-m", f"version {n}")
        commits.append(git(source, "rev-parse", "HEAD"))
    mirror = tmp_path / "mirror.git"
    subprocess.run(["git", "clone", "-q", "--mirror", str(source), str(mirror)], check=True)
    return mirror, commits


@pytest.fixture
def root(tmp_path) -> Path:
    return tmp_path / "data" / "worktrees"


def test_a_worktree_is_made_on_the_revisions_branch_at_the_commit(history, root):
    mirror, commits = history

    made = prepare_worktree(mirror, root, "q-1", 1, commits[1])

    assert made.path == root.resolve() / "q-1" / "r1"
    assert made.branch == "ephyra/q-1/r1"
    assert made.base == made.head == commits[1]
    assert git(made.path, "symbolic-ref", "HEAD") == "refs/heads/ephyra/q-1/r1"
    assert (made.path / "app.py").read_text() == "VERSION = 1\n"
    assert git(made.path, "status", "--porcelain") == ""


def test_a_commit_may_be_named_by_a_branch_of_the_mirror(history, root):
    mirror, commits = history

    made = prepare_worktree(mirror, root, "q-1", 1, "main")

    assert made.base == commits[2]


def test_preparing_the_same_revision_again_gives_the_same_clean_worktree(history, root):
    mirror, commits = history
    first = prepare_worktree(mirror, root, "q-1", 1, commits[1])
    (first.path / "app.py").write_text("half-done edit\n")
    (first.path / "scratch.txt").write_text("untracked\n")
    (first.path / ".venv").mkdir()
    (first.path / ".venv" / "kept").write_text("ignored files stay: the setup's cache\n")

    again = prepare_worktree(mirror, root, "q-1", 1, commits[1])

    assert again == first
    assert (again.path / "app.py").read_text() == "VERSION = 1\n"
    assert not (again.path / "scratch.txt").exists()
    assert (again.path / ".venv" / "kept").exists()
    assert list(listed_worktrees(mirror)) == [again.path]


def test_work_committed_by_an_earlier_attempt_on_the_branch_is_kept(history, root):
    mirror, commits = history
    first = prepare_worktree(mirror, root, "q-1", 1, commits[2])
    git(first.path, "revert", "--no-edit", commits[2])
    reverted = git(first.path, "rev-parse", "HEAD")

    again = prepare_worktree(mirror, root, "q-1", 1, commits[2])

    assert (again.base, again.head) == (commits[2], reverted)
    assert (again.path / "app.py").read_text() == "VERSION = 1\n"


def test_a_branch_that_does_not_descend_from_the_commit_is_refused_unless_reset(history, root):
    mirror, commits = history
    side = prepare_worktree(mirror, root, "q-9", 1, commits[0])
    (side.path / "app.py").write_text("VERSION = 'side'\n")
    git(side.path, "commit", "-q", "-am", "side work")
    side_tip = git(side.path, "rev-parse", "HEAD")
    git(mirror, "branch", "ephyra/q-1/r1", side_tip)

    with pytest.raises(
        WorktreeError, match=r"the branch ephyra/q-1/r1 exists at .*, which does not descend from"
    ):
        prepare_worktree(mirror, root, "q-1", 1, commits[1])
    assert git(mirror, "rev-parse", "ephyra/q-1/r1") == side_tip
    assert not (root / "q-1" / "r1").exists()

    reset = prepare_worktree(mirror, root, "q-1", 1, commits[1], reset=True)
    assert reset.head == commits[1]
    assert git(mirror, "rev-parse", "ephyra/q-1/r1") == commits[1]


def test_a_worktree_whose_git_metadata_was_lost_in_a_crash_is_rebuilt(history, root):
    mirror, commits = history
    made = prepare_worktree(mirror, root, "q-1", 1, commits[1])
    shutil.rmtree(mirror / "worktrees")  # the .git file now points at nothing

    rebuilt = prepare_worktree(mirror, root, "q-1", 1, commits[1])

    assert rebuilt.rebuilt
    assert git(rebuilt.path, "rev-parse", "HEAD") == commits[1]
    assert git(rebuilt.path, "symbolic-ref", "HEAD") == "refs/heads/ephyra/q-1/r1"
    assert list(listed_worktrees(mirror)) == [made.path]


def test_a_worktree_whose_directory_vanished_is_pruned_and_made_again(history, root):
    mirror, commits = history
    made = prepare_worktree(mirror, root, "q-1", 1, commits[1])
    shutil.rmtree(made.path)
    assert "prunable" in listed_worktrees(mirror)[made.path]

    again = prepare_worktree(mirror, root, "q-1", 1, commits[1])

    assert (again.path / "app.py").read_text() == "VERSION = 1\n"
    assert "prunable" not in listed_worktrees(mirror)[again.path]


def test_a_directory_that_is_not_a_worktree_is_cleared_and_rebuilt(history, root):
    mirror, commits = history
    path = root / "q-1" / "r1"
    path.mkdir(parents=True)
    (path / "debris").write_text("left by a crash\n")

    made = prepare_worktree(mirror, root, "q-1", 1, commits[1])

    assert made.rebuilt
    assert not (made.path / "debris").exists()
    assert (made.path / "app.py").read_text() == "VERSION = 1\n"


def test_a_worktree_stopped_in_the_middle_of_a_revert_is_rebuilt_clean(history, root):
    mirror, commits = history
    made = prepare_worktree(mirror, root, "q-1", 1, commits[2])
    # Reverting the first commit conflicts with the later ones: git stops halfway.
    done = subprocess.run(
        ["git", "-C", str(made.path), *IDENTITY, "revert", "--no-edit", commits[0]],
        capture_output=True,
    )
    assert done.returncode != 0

    again = prepare_worktree(mirror, root, "q-1", 1, commits[2])

    assert again.rebuilt
    assert git(again.path, "status", "--porcelain") == ""
    assert (again.path / "app.py").read_text() == "VERSION = 2\n"
    revert_head = git(again.path, "rev-parse", "--git-path", "REVERT_HEAD")
    assert not (again.path / revert_head).exists()


def test_removing_a_quests_worktrees_leaves_none_listed_and_keeps_its_branches(history, root):
    mirror, commits = history
    prepare_worktree(mirror, root, "q-1", 1, commits[1])
    prepare_worktree(mirror, root, "q-1", 2, commits[2])
    other = prepare_worktree(mirror, root, "q-2", 1, commits[2])

    removed = remove_quest_worktrees(mirror, root, "q-1")

    assert [path.name for path in removed] == ["r1", "r2"]
    assert list(listed_worktrees(mirror)) == [other.path]
    assert not (root / "q-1").exists()
    assert "worktree " + str(root.resolve() / "q-1") not in git(
        mirror, "worktree", "list", "--porcelain"
    )
    # The branches hold the patches: they stay until someone asks for them to go.
    assert git(mirror, "rev-parse", "ephyra/q-1/r2") == commits[2]


def test_removing_a_worktree_can_delete_its_branch_and_is_harmless_twice(history, root):
    mirror, commits = history
    prepare_worktree(mirror, root, "q-1", 1, commits[1])

    remove_worktree(mirror, root, "q-1", 1, delete_branch=True)
    remove_worktree(mirror, root, "q-1", 1, delete_branch=True)

    assert listed_worktrees(mirror) == {}
    assert git(mirror, "branch", "--list", "ephyra/*") == ""


def test_a_commit_the_mirror_does_not_have_is_refused(history, root):
    mirror, _ = history

    with pytest.raises(WorktreeError, match=r"the mirror .* has no commit 'ab12ab12ab12'"):
        prepare_worktree(mirror, root, "q-1", 1, "ab12ab12ab12")
    with pytest.raises(WorktreeError, match="'--upload-pack=x' is not a commit id or a revision"):
        prepare_worktree(mirror, root, "q-1", 1, "--upload-pack=x")
    assert listed_worktrees(mirror) == {}


@pytest.mark.parametrize(
    ("quest", "revision"), [("../up", 1), ("q/1", 1), ("", 1), ("q-1", 0), ("q-1", True)]
)
def test_a_quest_id_or_revision_that_would_escape_the_root_is_refused(
    history, root, quest, revision
):
    mirror, commits = history

    with pytest.raises(ValueError, match=r"^(quest id|revision)"):
        prepare_worktree(mirror, root, quest, revision, commits[0])
