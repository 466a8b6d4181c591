"""Preparing a checkout: the commit checked out, the setup run only when what it depends on
changed, its failures said plainly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ephyra.agent import Stopped, prepare
from ephyra.agent.gitcli import head_ref
from ephyra.agent.prepare import checkout
from tests.agent.repos import git, python, shop_history, shop_policy, workdir_for


def status(worktree) -> str:
    done = subprocess.run(
        ["git", "-C", str(worktree), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_the_setup_runs_once_and_is_reused_while_its_files_stay_the_same(tmp_path):
    # requirements.txt changes at the 4th and the 24th commit of the shop
    shop = shop_history(tmp_path / "shop", commits=24)
    workdir = workdir_for(shop, tmp_path)
    work = shop_policy()

    first = prepare(workdir, work, shop.main[10], name="p1")
    again = prepare(workdir, work, shop.main[5], name="p2")
    changed = prepare(workdir, work, shop.head, name="p3")

    assert (first.setup, first.reason) == ("ran", "no setup has run in this worktree")
    assert again.setup == "reused" and again.runs == ()
    assert again.reason == f"the setup files are as at {shop.main[10][:12]}"
    assert changed.setup == "ran"
    assert changed.reason == f"requirements.txt changed since {shop.main[10][:12]}"
    assert sorted(p.name for p in workdir.artifacts.glob("*.json")) == [
        "p1-setup.json",
        "p3-setup.json",
    ]


def test_the_commit_is_checked_out_and_the_branch_stays_where_it_was(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)

    prepare(workdir, shop_policy(), shop.main[3])
    assert head_ref(workdir.worktree) == shop.main[3]  # detached there
    branch_tip = subprocess.run(
        ["git", "-C", str(workdir.worktree), "rev-parse", "ephyra/q-1/r1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert branch_tip == shop.head

    prepare(workdir, shop_policy(), shop.head)
    assert head_ref(workdir.worktree) == "refs/heads/ephyra/q-1/r1"


def test_the_setup_record_stays_out_of_the_checkout(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)

    prepare(workdir, shop_policy(), shop.head)

    assert status(workdir.worktree) == ""  # .ready is ignored by the shop; the record is in .git
    assert not (workdir.worktree / ".ephyra-setup").exists()


def test_a_repository_whose_setup_fails_at_head_says_which_command_and_what_it_printed(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, setup_fails=(24,))
    workdir = workdir_for(shop, tmp_path)

    failed = prepare(workdir, shop_policy(), shop.head)

    assert not failed.ok and failed.setup == "failed"
    summary = failed.summary()
    assert summary.startswith(
        f"The setup failed at {shop.head[:12]}: the setup command ({python()} tools/setup.py) "
        "ended with local: exit 1 after "
    )
    assert summary.endswith(
        "; its output ends: ERROR: No matching distribution found for no-such-package"
    )
    assert failed.to_evidence()["runs"][0]["digest"].startswith("sha256:")
    # nothing was recorded as set up: the next prepare tries again
    assert prepare(workdir, shop_policy(), shop.head).setup == "failed"


def test_something_the_last_setup_made_that_is_gone_makes_the_setup_run_again(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)
    prepare(workdir, shop_policy(), shop.head, name="p1")

    (workdir.worktree / ".ready").unlink()  # as a git clean -ffdx would
    again = prepare(workdir, shop_policy(), shop.head, name="p2")

    assert again.setup == "ran"
    assert again.reason == ".ready (made by the last setup) is gone"
    assert (workdir.worktree / ".ready").exists()


def test_a_changed_setup_command_runs_the_setup_again(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)
    prepare(workdir, shop_policy(), shop.head, name="p1")

    other = shop_policy(setup=[[python(), "-X", "utf8", "tools/setup.py"]])
    again = prepare(workdir, other, shop.head, name="p2")

    assert again.setup == "ran"
    assert "the setup commands, the setup files or the runner changed" in again.reason


def test_setup_files_are_git_globs(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24)
    workdir = workdir_for(shop, tmp_path)
    # only the README counts now: it changes at every fifth commit (5, 10, 15…)
    work = shop_policy(setup_files=["README*"])

    prepare(workdir, work, shop.main[5], name="p1")
    same = prepare(workdir, work, shop.main[8], name="p2")
    moved = prepare(workdir, work, shop.main[9], name="p3")

    assert same.setup == "reused"
    assert moved.setup == "ran" and moved.reason.startswith("README.md changed since")


def test_a_policy_without_setup_only_checks_out(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)

    done = prepare(workdir, shop_policy(setup=[]), shop.main[2])

    assert done.setup == "none" and done.ok and head_ref(workdir.worktree) == shop.main[2]


def test_a_stop_request_stops_before_anything_runs(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path, should_stop=lambda: True)

    with pytest.raises(Stopped):
        prepare(workdir, shop_policy(), shop.head)
    assert not workdir.artifacts.exists()


def test_a_checkout_forgets_bytecode_a_same_size_change_would_hide(tmp_path):
    # Two commits a bisect checks out within one second: the module changes but keeps its size,
    # so Python would trust the bytecode cached for the first and run the old code.
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    shas = []
    for key in ("lines", "items"):
        (repo / "views.py").write_text(f'KEY = "{key}"\n')
        git(repo, "add", "views.py")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", key)
        shas.append(git(repo, "rev-parse", "HEAD"))

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def key_seen() -> str:
        run = [sys.executable, "-c", "import views; print(views.KEY)"]
        done = subprocess.run(run, cwd=repo, env=env, capture_output=True, text=True, check=True)
        return done.stdout

    checkout(repo, shas[0])
    stamp = (repo / "views.py").stat().st_mtime_ns
    assert key_seen() == "lines\n"  # caches views.py's bytecode
    checkout(repo, shas[1])
    os.utime(repo / "views.py", ns=(stamp, stamp))  # the same second, as in a quick bisect
    assert key_seen() == "items\n"


def test_a_checkout_keeps_the_bytecode_a_project_committed(tmp_path):
    # Some source trees carry a .pyc (inflection's sdist has docs/__pycache__/conf.cpython-38.pyc);
    # removing it would leave the worktree unclean and the proof would refuse the head.
    repo = tmp_path / "repo"
    (repo / "docs" / "__pycache__").mkdir(parents=True)
    git(repo, "init", "--quiet", "--initial-branch=main")
    (repo / "docs" / "conf.py").write_text("project = 'x'\n")
    (repo / "docs" / "__pycache__" / "conf.cpython-38.pyc").write_bytes(b"committed")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "one")
    sha = git(repo, "rev-parse", "HEAD")
    (repo / "docs" / "__pycache__" / "conf.cpython-311.pyc").write_bytes(b"cached by a run")

    checkout(repo, sha)

    assert (repo / "docs" / "__pycache__" / "conf.cpython-38.pyc").read_bytes() == b"committed"
    assert not (repo / "docs" / "__pycache__" / "conf.cpython-311.pyc").exists()
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
