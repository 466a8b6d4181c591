"""Real repositories for the steps' tests and benchmark, built with the git command line.

``History`` writes any history (commits on branches, merges, authors, dates) in one
``git fast-import`` run, so a history of 10,000 commits takes seconds. ``shop_history`` builds
the one the tests share: a small Python package, ``shop``, with a pytest suite, a setup script
(``tools/setup.py``: it "installs" ``requirements.txt`` and fails on a package it does not
know), and a history in which one commit breaks ``shop.cart.line_total`` (a line without a
quantity now raises ``KeyError: 'quantity'``). Options add merges, a regression that comes in
through a merge, commits whose setup fails, a later change that makes the revert conflict,
and a suite that takes a while.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ephyra.agent.inputs import Frame, SignalFacts, Workdir
from ephyra.agent.locate import ExitStatusReproduction
from ephyra.policy.work import WorkPolicy
from ephyra.runner import LocalRunner, prepare_worktree

AUTHORS = (
    "Ada Lovelace <ada@example.com>",
    "Grace Hopper <grace@example.com>",
    "Alan Turing <alan@example.com>",
)
CULPRIT_AUTHOR = "Rita Regress <rita@example.com>"
START = 1_704_067_200  # 2024-01-01T00:00:00Z
NODE_ID = "tests/test_cart.py::test_a_line_without_quantity_counts_once"


def git(where: Path, *args: str, input: str | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(where), "-c", "user.name=Dev", "-c", "user.email=dev@example.com", *args],
        capture_output=True,
        text=True,
        input=input,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass
class _Commit:
    mark: int
    branch: str
    message: str
    files: dict[str, str | None]
    author: str
    when: int
    parent: int | None
    merge: int | None


@dataclass
class History:
    """Commits to write, in order; each gets a mark (its number) that ``write`` maps to its
    sha. A branch continues from its own last commit; ``branch(name, at)`` starts one."""

    commits: list[_Commit] = field(default_factory=list)
    tips: dict[str, int | None] = field(default_factory=lambda: {"main": None})

    def branch(self, name: str, at: int | None) -> None:
        self.tips[name] = at

    def commit(
        self,
        message: str,
        files: dict[str, str | None],
        *,
        branch: str = "main",
        author: str | None = None,
        merge: int | None = None,
    ) -> int:
        mark = len(self.commits) + 1
        self.commits.append(
            _Commit(
                mark=mark,
                branch=branch,
                message=message,
                files=dict(files),
                author=author or AUTHORS[mark % len(AUTHORS)],
                when=START + mark * 3600,
                parent=self.tips.get(branch),
                merge=merge,
            )
        )
        self.tips[branch] = mark
        return mark

    def write(self, path: Path) -> dict[int, str]:
        """Create the repository at ``path`` (branch ``main`` checked out); marks to shas."""
        path.mkdir(parents=True, exist_ok=True)
        git(path, "init", "--quiet", "--initial-branch=main")
        chunks: list[bytes] = []
        for c in self.commits:
            chunks.append(f"commit refs/heads/{c.branch}\nmark :{c.mark}\n".encode())
            stamp = f"{c.author} {c.when} +0000\n"
            chunks.append(f"author {stamp}committer {stamp}".encode())
            message = c.message.encode()
            chunks.append(b"data %d\n%s\n" % (len(message), message))
            if c.parent is not None:
                chunks.append(f"from :{c.parent}\n".encode())
            if c.merge is not None:
                chunks.append(f"merge :{c.merge}\n".encode())
            for name, content in c.files.items():
                if content is None:
                    chunks.append(f"D {name}\n".encode())
                else:
                    data = content.encode()
                    chunks.append(f"M 100644 inline {name}\n".encode())
                    chunks.append(b"data %d\n%s\n" % (len(data), data))
        marks = path / ".git" / "marks"
        subprocess.run(
            ["git", "-C", str(path), "fast-import", "--quiet", f"--export-marks={marks}"],
            input=b"".join(chunks),
            check=True,
            capture_output=True,
        )
        shas = {}
        for line in marks.read_text().splitlines():
            mark, sha = line.split()
            shas[int(mark[1:])] = sha
        marks.unlink()
        git(path, "checkout", "--quiet", "--force", "main")
        return shas


# --- The shop -------------------------------------------------------------------------------

CART_HEAD = '''"""The cart: lines of a price and a quantity."""


def line_total(line):
    """What one line costs."""
'''
GOOD_BODY = '    return line["price"] * line.get("quantity", 1)\n'
BAD_BODY = '    return line["price"] * line["quantity"]\n'
CONFLICTING_BODY = '    return line["price"] * line["quantity"] * (1 - line.get("discount", 0))\n'
CART_TAIL = '''

def total(lines):
    """What the cart costs."""
    return sum(line_total(line) for line in lines)
'''
VIEWS = '''"""The checkout page."""

from shop.cart import total


def checkout(request):
    return {"total": total(request["lines"])}
'''
TEST_CART = """from shop.cart import total


def test_a_line_without_quantity_counts_once():
    assert total([{"price": 3}]) == 3


def test_quantities_multiply_the_price():
    assert total([{"price": 3, "quantity": 2}, {"price": 1, "quantity": 1}]) == 7
"""
BROKEN_TEST = """def test_prices_are_in_cents():
    assert 0.1 + 0.2 == 0.3, "floats are not cents"
"""
GUARD_TEST = """import pytest

from shop.cart import total


def test_a_line_must_name_its_quantity():
    with pytest.raises(KeyError):
        total([{"price": 3}])
"""
FLAKY_TEST = """import pathlib

from shop.cart import total


def test_the_cart_survives_a_second_look():
    try:
        total([{"price": 3}])
    except KeyError:
        return  # the broken cart: nothing to count
    counter = pathlib.Path(".flaky-count")
    seen = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(seen + 1))
    assert seen > 0, "fails the first time it sees the fixed cart in this checkout"
"""
VIEWS_TEST = """from shop.views import checkout


def test_checkout_totals_the_lines():
    assert checkout({"lines": [{"price": 2, "quantity": 1}]}) == {"total": 2}
"""
SETUP = '''"""Install the requirements (pretend): fail on a package nobody has."""
import pathlib
import sys

KNOWN = {"attrs", "click", "requests", "rich"}
wanted = [w.strip() for w in pathlib.Path("requirements.txt").read_text().split() if w.strip()]
for name in wanted:
    if name not in KNOWN:
        print(f"ERROR: No matching distribution found for {name}")
        sys.exit(1)
pathlib.Path(".ready").write_text("\\n".join(wanted))
print("installed", *wanted)
'''
CONFTEST = """import pathlib

import pytest


def pytest_configure(config):
    if not pathlib.Path(".ready").exists():
        pytest.exit("the checkout is not set up: run tools/setup.py", returncode=3)
"""
PYPROJECT = """[project]
name = "shop"
version = "0.1"

[tool.pytest.ini_options]
addopts = "-p no:cacheprovider"
"""


@dataclass(frozen=True)
class Shop:
    """A shop repository and what its history holds."""

    path: Path  # the working repository, branch main checked out
    main: tuple[str, ...]  # main's first-parent commits, oldest first
    culprit: str  # the first-parent commit that broke line_total (a merge when it came so)
    breaking: str  # the commit that changed the line (on a side branch when merged)
    last_good: str  # the first-parent commit before the culprit
    head: str
    setup_fails: tuple[str, ...]  # commits whose setup fails
    node_id: str = NODE_ID

    def signal(self, prefix: str = "/srv/app") -> SignalFacts:
        """The production error as ingest stores it: innermost frame first, paths of the
        server, a library frame at the end."""
        text = git(self.path, "show", f"{self.head}:shop/cart.py").splitlines()
        body = next(n for n, line in enumerate(text, 1) if 'line["price"]' in line)
        call = next(n for n, line in enumerate(text, 1) if "line_total(line) for" in line)
        return SignalFacts(
            fingerprint="fp-keyerror-quantity",
            exception_type="KeyError",
            message="'quantity'",
            frames=(
                Frame(f"{prefix}/shop/cart.py", body, "line_total", "shop.cart", True),
                Frame(f"{prefix}/shop/cart.py", call, "total", "shop.cart", True),
                Frame(f"{prefix}/shop/views.py", 7, "checkout", "shop.views", True),
                Frame(
                    "/usr/lib/python3/site-packages/django/core/handlers/base.py",
                    197,
                    "_get_response",
                    "django.core.handlers.base",
                    False,
                ),
            ),
            first_seen=datetime(2024, 3, 1, tzinfo=UTC),
        )

    def views_signal(self, prefix: str = "/srv/app") -> SignalFacts:
        """The second regression's error (``views_bug``), as ingest stores it."""
        return SignalFacts(
            fingerprint="fp-keyerror-items",
            exception_type="KeyError",
            message="'items'",
            frames=(
                Frame(f"{prefix}/shop/views.py", 7, "checkout", "shop.views", True),
                Frame(
                    "/usr/lib/python3/site-packages/django/core/handlers/base.py",
                    197,
                    "_get_response",
                    "django.core.handlers.base",
                    False,
                ),
            ),
            first_seen=datetime(2024, 3, 1, tzinfo=UTC),
        )

    def mirror(self, where: Path, *, depth: int | None = None) -> Path:
        """A bare mirror of the shop, as a workspace holds one (``depth``: shallow)."""
        args = ["clone", "--quiet", "--mirror"]
        if depth is not None:
            args += [f"--depth={depth}"]
        subprocess.run(
            ["git", *args, f"file://{self.path}", str(where)], check=True, capture_output=True
        )
        return where


def shop_history(
    path: Path,
    *,
    commits: int = 24,
    culprit: int = 15,
    merges: bool = False,
    culprit_merged: bool = False,
    setup_fails: tuple[int, ...] = (),
    conflict: bool = False,
    suite_seconds: float = 0.0,
    broken_test: bool = False,
    guard_test: bool = False,
    flaky_test: bool = False,
    views_bug: bool = False,
) -> Shop:
    """Build the shop at ``path``: ``commits`` first-parent commits on main, the one at
    ``culprit`` (1-based) breaking ``line_total``.

    ``merges``: every fourth change comes through a merged branch of two commits, so main's
    history has merges. ``culprit_merged``: the breaking commit is on a branch and main gets it
    in a merge (the first-parent culprit is that merge). ``setup_fails``: at these commits
    ``requirements.txt`` names a package the setup cannot install (fixed by the next one).
    ``conflict``: a later commit changes the broken line again, so reverting the culprit
    conflicts. ``suite_seconds``: one more test that takes that long.

    For proofs: ``broken_test``, a test that fails at every commit; ``guard_test``, a test added
    after the culprit that asserts the broken behaviour (it passes at the head and fails once
    the culprit is reverted); ``flaky_test``, a test that fails the first time it sees the
    fixed cart in a checkout and passes after (a counter file in the checkout);
    ``views_bug``: three commits after the culprit, a second, independent regression in
    ``shop.views.checkout`` (``KeyError: 'items'``), with its own test."""
    if not 2 <= culprit <= commits:
        raise ValueError("the culprit must have a good commit before it")
    h = History()
    requirements = ["attrs"]
    body = GOOD_BODY
    extras: list[str] = []
    first_parent: list[int] = []
    culprit_mark = breaking_mark = 0
    failing: list[int] = []

    def cart() -> str:
        return CART_HEAD + body + CART_TAIL + "".join(extras)

    def requirements_change(n: int) -> dict[str, str | None]:
        if n in setup_fails:
            return {"requirements.txt": "\n".join([*requirements, "no-such-package"]) + "\n"}
        if n - 1 in setup_fails:
            return {"requirements.txt": "\n".join(requirements) + "\n"}
        return {}

    for n in range(1, commits + 1):
        if n == 1:
            files = {
                ".gitignore": ".ready\n__pycache__/\n",
                "pyproject.toml": PYPROJECT,
                "requirements.txt": "attrs\n",
                "tools/setup.py": SETUP,
                "conftest.py": CONFTEST,
                "shop/__init__.py": '__version__ = "0.1"\n',
                "shop/cart.py": cart(),
                "shop/views.py": VIEWS,
                "tests/test_cart.py": TEST_CART,
                "README.md": "# shop\n",
            }
            if broken_test:
                files["tests/test_prices.py"] = BROKEN_TEST
            if flaky_test:
                files["tests/test_flaky.py"] = FLAKY_TEST
            if views_bug:
                files["tests/test_views.py"] = VIEWS_TEST
            if suite_seconds:
                files["tests/test_catalogue.py"] = (
                    "import time\n\n\ndef test_the_catalogue_loads():\n"
                    f"    time.sleep({suite_seconds})\n"
                )
            first_parent.append(h.commit("Start the shop", files))
            continue
        if n == culprit:
            body = BAD_BODY
            message = "Read the quantity of each line directly"
            if culprit_merged:
                h.branch("feature/quantity", first_parent[-1])
                tidy = {"docs/quantity.md": "Each line has a quantity.\n"}
                h.commit("Document quantities", tidy, branch="feature/quantity")
                breaking_mark = h.commit(
                    message,
                    {"shop/cart.py": cart(), **requirements_change(n)},
                    branch="feature/quantity",
                    author=CULPRIT_AUTHOR,
                )
                # fast-import takes a merge's tree from its file commands: the branch's files
                culprit_mark = h.commit(
                    "Merge branch 'feature/quantity'",
                    {**tidy, "shop/cart.py": cart(), **requirements_change(n)},
                    merge=breaking_mark,
                )
            else:
                culprit_mark = breaking_mark = h.commit(
                    message,
                    {"shop/cart.py": cart(), **requirements_change(n)},
                    author=CULPRIT_AUTHOR,
                )
            first_parent.append(culprit_mark)
            if n in setup_fails:
                failing.append(culprit_mark)
            continue
        files = _filler(n, requirements, extras)
        if "shop/cart.py" in files:
            files["shop/cart.py"] = cart()
        if conflict and n == culprit + 1:
            body = CONFLICTING_BODY
            files = {"shop/cart.py": cart()}
        files.update(requirements_change(n))
        if guard_test and n == culprit + 2:
            files["tests/test_strict.py"] = GUARD_TEST
        if views_bug and n == culprit + 3:
            # Its own commit, so that its revert touches nothing else.
            files = {"shop/views.py": VIEWS.replace('request["lines"]', 'request["items"]')}
        if merges and n % 4 == 0 and n not in setup_fails and n - 1 not in setup_fails:
            branch = f"feature/{n}"
            h.branch(branch, first_parent[-1])
            start = {f"docs/feature-{n}.md": f"# feature {n}\n"}
            h.commit(f"Start feature {n}", start, branch=branch)
            side = h.commit(f"Finish feature {n}", files, branch=branch)
            mark = h.commit(f"Merge branch '{branch}'", {**start, **files}, merge=side)
        else:
            mark = h.commit(_subject(n, files), files)
        first_parent.append(mark)
        if n in setup_fails:
            failing.append(mark)
    shas = h.write(path)
    main = tuple(shas[m] for m in first_parent)
    index = first_parent.index(culprit_mark)
    return Shop(
        path=path,
        main=main,
        culprit=shas[culprit_mark],
        breaking=shas[breaking_mark],
        last_good=main[index - 1],
        head=main[-1],
        setup_fails=tuple(shas[m] for m in failing),
    )


def _filler(n: int, requirements: list[str], extras: list[str]) -> dict[str, str | None]:
    """A harmless change, varied so that history touches several files: the README, the
    version, a pricing module, a helper added at the end of the cart, the requirements."""
    kind = n % 5
    if kind == 0:
        return {"README.md": f"# shop\n\nRevision {n} of the shop.\n"}
    if kind == 1:
        return {"shop/__init__.py": f'__version__ = "0.{n}"\n'}
    if kind == 2:
        return {
            "shop/pricing.py": f"RATE = {n}\n\n\ndef tax(amount):\n    return amount * RATE / 100\n"
        }
    if kind == 3:
        extras.append(f"\n\ndef count_{n}(lines):\n    return len(lines) + {n} - {n}\n")
        if len(extras) > 12:  # the file stays small however long the history
            del extras[0]
        return {"shop/cart.py": ""}  # the caller writes the cart with the new helper
    if n % 20 == 4 and len(requirements) < 4:
        requirements.append(("click", "requests", "rich")[len(requirements) - 1])
        return {"requirements.txt": "\n".join(requirements) + "\n"}
    return {f"docs/notes-{n % 7}.md": f"Note {n}\n"}


def _subject(n: int, files: dict[str, str | None]) -> str:
    first = next(iter(files))
    return f"Change {first} ({n})"


def python() -> str:
    """The Python that runs the shop's tests: this one (it has pytest)."""
    return sys.executable


# --- Working on a shop --------------------------------------------------------------------


def shop_policy(**changes: object) -> WorkPolicy:
    """The shop's work policy: the setup script, pytest, this Python."""
    base: dict[str, object] = {
        "setup": [[python(), "tools/setup.py"]],
        "test": [python(), "-m", "pytest", "-q"],
    }
    return WorkPolicy.model_validate({**base, **changes})


def node_reproduction(shop: Shop) -> ExitStatusReproduction:
    """The shop's failing test as a reproduction: its node id run alone."""
    return ExitStatusReproduction((python(), "-m", "pytest", "-q", shop.node_id))


def workdir_for(
    shop: Shop,
    tmp_path: Path,
    *,
    depth: int | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    quest: str = "q-1",
) -> Workdir:
    """The quest's worktree of a mirror of the shop (``depth``: shallow), at the head, with
    the local runner."""
    mirror = tmp_path / "mirror.git"
    if not mirror.exists():
        shop.mirror(mirror, depth=depth)
    made = prepare_worktree(mirror, tmp_path / "worktrees", quest, 1, shop.head)
    return Workdir(
        worktree=made.path,
        artifacts=tmp_path / "artifacts" / quest,
        runner=LocalRunner(),
        env={},
        should_stop=should_stop,
    )
