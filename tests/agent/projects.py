"""Small Python projects in real Git repositories, for the reproduction and agent tests.

``Project.make(tmp_path, files)`` commits ``files`` to a repository, mirrors it as Ephyra
does (a bare mirror), and ``project.workdir()`` gives a quest revision's worktree of it (made
by the runner's ``prepare_worktree``) with the real ``LocalRunner`` (or another runner).
The projects' tests run with this interpreter (it has pytest), never with a shell.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ephyra.agent.inputs import Frame, SignalFacts, Workdir
from ephyra.core.ports import Runner
from ephyra.runner import LocalRunner, prepare_worktree

IDENTITY = ("-c", "user.name=Dev", "-c", "user.email=dev@example.com")
PYTHON = sys.executable
PYTEST = [PYTHON, "-m", "pytest", "-q"]


def git(where: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(where), *IDENTITY, *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


CART = """\
class CartError(Exception):
    pass


def total(prices):
    return sum(prices) / len(prices) * len(prices)


def lookup(items, key):
    return items[key]
"""

CART_TESTS = """\
from shop.cart import lookup, total


def test_total_of_two_prices():
    assert total([2, 3]) == 5


def test_total_of_an_empty_cart():
    assert total([]) == 0


def test_lookup():
    assert lookup({"a": 1}, "a") == 1
"""


def shop_files(**more: str) -> dict[str, str]:
    """A package ``shop`` whose ``total`` divides by zero on an empty cart, with tests."""
    return {
        ".gitignore": "__pycache__/\n.venv/\n",
        "shop/__init__.py": "",
        "shop/cart.py": CART,
        "tests/__init__.py": "",
        "tests/test_cart.py": CART_TESTS,
        **more,
    }


def zero_division_signal(**changes) -> SignalFacts:
    """The production error of ``shop_files``: ``total`` divided by zero, seen at
    ``/srv/app/shop/cart.py`` behind a view."""
    facts = {
        "fingerprint": "fp-zero",
        "exception_type": "ZeroDivisionError",
        "message": "division by zero",
        "frames": (
            Frame("/srv/app/shop/cart.py", 6, "total", "shop.cart", True),
            Frame("/srv/app/shop/views.py", 40, "checkout", "shop.views", True),
            Frame("/usr/lib/python3/site-packages/django/core/handlers.py", 9, "get", None, False),
        ),
        "first_seen": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    }
    facts.update(changes)
    return SignalFacts(**facts)


@dataclass
class Project:
    source: Path
    mirror: Path
    root: Path
    head: str

    @classmethod
    def make(cls, tmp_path: Path, files: dict[str, str]) -> Project:
        source = tmp_path / "source"
        source.mkdir()
        git(source, "init", "-q", "-b", "main")
        project = cls(source, tmp_path / "mirror.git", tmp_path / "data" / "worktrees", "")
        project.commit(files, "the shop")
        return project

    def commit(self, files: dict[str, str], message: str) -> str:
        for name, text in files.items():
            path = self.source / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
        git(self.source, "add", "-A")
        git(self.source, "commit", "-q", "-m", message)
        self.head = git(self.source, "rev-parse", "HEAD")
        if self.mirror.exists():
            git(self.mirror, "fetch", "-q", str(self.source), "+refs/heads/*:refs/heads/*")
        else:
            subprocess.run(
                ["git", "clone", "-q", "--mirror", str(self.source), str(self.mirror)], check=True
            )
        return self.head

    def workdir(
        self,
        *,
        runner: Runner | None = None,
        env: dict[str, str] | None = None,
        should_stop=lambda: False,
        quest: str = "q-1",
        revision: int = 1,
    ) -> Workdir:
        worktree = prepare_worktree(self.mirror, self.root, quest, revision, self.head)
        artifacts = self.root.parent / "artifacts" / quest / f"r{revision}"
        artifacts.mkdir(parents=True, exist_ok=True)
        return Workdir(
            worktree=worktree.path,
            artifacts=artifacts,
            runner=runner or LocalRunner(),
            env=env or {},
            should_stop=should_stop,
        )
