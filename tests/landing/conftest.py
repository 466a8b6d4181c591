"""Real Git for the landing tests: a bare remote, a person's clone that pushes to it, and the
workspace's bare mirror where quests make their patches (in worktrees, as the steps do)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from ephyra.runner import prepare_worktree

IDENTITY = ("-c", "user.name=Dev", "-c", "user.email=dev@example.com")
APP = """def total(items):
    return sum(items)


def greet(name):
    return "hello " + name


def tax(amount):
    return amount * 0.2
"""


def git(where: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(where), *IDENTITY, *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


@dataclass
class Repos:
    remote: Path  # the workspace's remote: a bare repository
    person: Path  # someone else's clone, pushing to the remote's main
    mirror: Path  # the workspace's bare mirror
    worktrees: Path

    def tip(self, branch: str = "main") -> str:
        return git(self.remote, "rev-parse", f"refs/heads/{branch}")

    def read(self, commit: str, path: str = "app.py", repo: Path | None = None) -> str:
        return git(repo or self.remote, "show", f"{commit}:{path}") + "\n"

    def message(self, commit: str, repo: Path | None = None) -> str:
        return git(repo or self.mirror, "log", "-1", "--format=%B", commit)

    def parents(self, commit: str, repo: Path | None = None) -> list[str]:
        return git(repo or self.remote, "log", "-1", "--format=%P", commit).split()

    def push_as_person(self, old: str, new: str, message: str, path: str = "app.py") -> str:
        """Another person's commit on the remote's main (the base moves)."""
        git(self.person, "pull", "-q", "--ff-only")
        file = self.person / path
        file.write_text(edit(file.read_text(), old, new) if old else new)
        git(self.person, "commit", "-q", "-am", message)
        git(self.person, "push", "-q", "origin", "main")
        return git(self.person, "rev-parse", "HEAD")

    def patch(
        self,
        changes: list[tuple[str, str]],
        *,
        base: str | None = None,
        quest: str = "q1",
        revision: int = 1,
        path: str = "app.py",
    ) -> tuple[str, str]:
        """The quest's patch, one commit per change, in the revision's worktree of the mirror
        on its branch; returns (base, head)."""
        base = base or git(self.mirror, "rev-parse", "refs/heads/main")
        tree = prepare_worktree(self.mirror, self.worktrees, quest, revision, base)
        for n, (old, new) in enumerate(changes):
            file = tree.path / path
            file.write_text(edit(file.read_text(), old, new))
            message = f"Fix {quest} step {n}\n\nEphyra-Quest: {quest}\nEphyra-Revision: {revision}"
            git(tree.path, "commit", "-q", "-am", message)
        return base, git(tree.path, "rev-parse", "HEAD")

    def fetch_into_mirror(self) -> None:
        """The mirror sees the remote's main as it is now (as a workspace's fetch would)."""
        git(self.mirror, "fetch", "-q", str(self.remote), "+refs/heads/main:refs/heads/main")


@pytest.fixture
def repos(tmp_path) -> Repos:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    person = tmp_path / "person"
    git(tmp_path, "clone", "-q", str(remote), str(person))
    (person / "app.py").write_text(APP)
    (person / "README").write_text("shop\n")
    git(person, "add", "-A")
    git(person, "commit", "-q", "-m", "The shop")
    git(person, "push", "-q", "origin", "HEAD:main")
    mirror = tmp_path / "mirror.git"
    git(tmp_path, "clone", "-q", "--mirror", str(remote), str(mirror))
    return Repos(remote, person, mirror, tmp_path / "worktrees")
