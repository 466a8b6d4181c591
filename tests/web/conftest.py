import subprocess
from pathlib import Path

import pytest


@pytest.fixture
def git_repository(tmp_path):
    """A factory: a real Git repository under tmp_path with one commit on each branch named."""

    def make(name: str = "shop", branches: tuple[str, ...] = ("main",)) -> Path:
        path = tmp_path / name
        subprocess.run(["git", "init", "-q", "-b", branches[0], str(path)], check=True)
        who = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
        subprocess.run(
            ["git", "-C", str(path), *who, "commit", "-q", "--allow-empty", "-m", "init"],
            check=True,
        )
        for branch in branches[1:]:
            subprocess.run(["git", "-C", str(path), "branch", branch], check=True)
        return path

    return make
