"""The patch: the culprit reverted on the quest revision's branch, once."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pytest

from ephyra.agent import Conflict, Patched, RevertError, revert
from ephyra.agent.gitcli import git_dir, head_ref
from ephyra.core.events import PatchFailed, PatchRecorded
from ephyra.runner import prepare_worktree
from tests.agent.repos import GOOD_BODY, git, shop_history, workdir_for


def log(worktree) -> list[str]:
    return git(worktree, "log", "--format=%H", "--first-parent").split()


def test_a_clean_revert_is_one_commit_on_the_quest_branch(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)

    patched = revert(workdir, shop.culprit, mainline=None)

    assert isinstance(patched, Patched)
    assert patched.base == shop.head and patched.branch == "ephyra/q-1/r1"
    assert log(workdir.worktree)[:2] == [patched.head, shop.head]
    assert patched.files == ("shop/cart.py",) and not patched.again
    assert GOOD_BODY in (workdir.worktree / "shop" / "cart.py").read_text()
    message = git(workdir.worktree, "log", "-1", "--format=%an <%ae>%n%B")
    assert message.startswith('Ephyra <ephyra@localhost>\nRevert "Read the quantity')
    assert f"This reverts commit {shop.culprit}." in message
    event = PatchRecorded(
        id="e-1",
        quest="q-1",
        at=datetime.now(UTC),
        head=patched.head,
        base=patched.base,
        evidence=patched.to_evidence(),
    )
    assert event.head == patched.head


def test_reverting_again_returns_the_same_patch_and_makes_no_second_commit(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)

    first = revert(workdir, shop.culprit, mainline=None)
    second = revert(workdir, shop.culprit, mainline=None)

    assert isinstance(second, Patched) and second.again
    assert (second.head, second.base, second.files) == (first.head, first.base, first.files)
    assert log(workdir.worktree)[:2] == [first.head, shop.head]


def test_a_branch_that_already_exists_keeps_its_revert_and_is_not_patched_twice(tmp_path):
    # a crash after the revert: the worktree is made again on the existing branch
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)
    first = revert(workdir, shop.culprit, mainline=None)

    made = prepare_worktree(tmp_path / "mirror.git", tmp_path / "worktrees", "q-1", 1, shop.head)
    again = revert(workdir, shop.culprit, mainline=None)

    assert made.head == first.head != made.base  # the worktree module kept the branch's work
    assert isinstance(again, Patched) and again.head == first.head and again.again


def test_a_merge_culprit_is_reverted_against_its_first_parent(tmp_path):
    shop = shop_history(tmp_path / "shop", merges=True, culprit_merged=True)
    workdir = workdir_for(shop, tmp_path)

    patched = revert(workdir, shop.culprit, mainline=1)

    assert isinstance(patched, Patched)
    assert GOOD_BODY in (workdir.worktree / "shop" / "cart.py").read_text()
    assert set(patched.files) == {"shop/cart.py", "docs/quantity.md"}  # all the merge brought in
    assert revert(workdir, shop.culprit, mainline=1) == Patched(
        **{**patched.__dict__, "again": True}
    )


def test_a_merge_culprit_without_a_mainline_is_refused_with_the_reason(tmp_path):
    shop = shop_history(tmp_path / "shop", merges=True, culprit_merged=True)
    workdir = workdir_for(shop, tmp_path)

    with pytest.raises(RevertError, match=r"is a merge: revert it with mainline=1"):
        revert(workdir, shop.culprit, mainline=None)
    with pytest.raises(RevertError, match=r"is not a merge: revert it without a mainline"):
        revert(workdir, shop.main[2], mainline=1)
    assert log(workdir.worktree)[0] == shop.head


def test_a_conflicting_revert_is_aborted_and_names_the_files(tmp_path):
    shop = shop_history(tmp_path / "shop", conflict=True)
    workdir = workdir_for(shop, tmp_path)

    result = revert(workdir, shop.culprit, mainline=None)

    assert isinstance(result, Conflict)
    assert (result.reason, result.files) == ("conflict", ("shop/cart.py",))
    assert result.summary().endswith("The revert was aborted; the branch is unchanged.")
    assert log(workdir.worktree)[0] == shop.head
    assert git(workdir.worktree, "status", "--porcelain") == ""
    assert not (git_dir(workdir.worktree) / "REVERT_HEAD").exists()
    event = PatchFailed(
        id="e-1",
        quest="q-1",
        at=datetime.now(UTC),
        reason="revert_conflict",
        files=result.files,
        evidence=result.to_evidence(),
    )
    assert event.files == ("shop/cart.py",)


def test_a_revert_of_a_change_already_undone_is_reported_as_empty(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)
    # a commit on the branch puts the line back as it was before the culprit
    cart = workdir.worktree / "shop" / "cart.py"
    cart.write_text(cart.read_text().replace('line["quantity"]', 'line.get("quantity", 1)'))
    git(workdir.worktree, "commit", "-q", "-am", "Put the default quantity back")
    tip = log(workdir.worktree)[0]

    result = revert(workdir, shop.culprit, mainline=None)

    assert isinstance(result, Conflict) and result.reason == "empty"
    assert log(workdir.worktree)[0] == tip
    assert head_ref(workdir.worktree) == "refs/heads/ephyra/q-1/r1"


def test_a_worktree_off_its_branch_is_refused(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)
    subprocess.run(["git", "-C", str(workdir.worktree), "checkout", "-q", "--detach"], check=True)

    with pytest.raises(RevertError, match="the worktree is not on its branch"):
        revert(workdir, shop.culprit, mainline=None)


def test_changes_left_by_a_test_run_do_not_stop_the_revert(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)
    (workdir.worktree / "shop" / "cart.py").write_text("garbage left by a test\n")

    patched = revert(workdir, shop.culprit, mainline=None)

    assert isinstance(patched, Patched)
    assert GOOD_BODY in (workdir.worktree / "shop" / "cart.py").read_text()


def test_a_union_merge_rule_of_the_project_does_not_hide_a_conflicting_revert(tmp_path):
    # more-itertools ships `more.py merge=union`: git would keep both sides of the conflicting
    # line and call the revert clean. Ephyra's revert must see the conflict.
    shop = shop_history(tmp_path / "shop", conflict=True)
    workdir = workdir_for(shop, tmp_path)
    (workdir.worktree / ".gitattributes").write_text("shop/cart.py merge=union\n")

    result = revert(workdir, shop.culprit, mainline=None)

    assert isinstance(result, Conflict)
    assert result.files == ("shop/cart.py",)
    assert log(workdir.worktree)[0] == shop.head
