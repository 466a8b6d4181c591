"""A patch rebased onto a base that moved, and a landed patch rolled back: both in the mirror,
both leaving everything as it was when they conflict."""

from __future__ import annotations

import stat

from ephyra.landing import (
    BaseMoved,
    Conflict,
    Landed,
    Rebased,
    Refused,
    RolledBack,
    land,
    landed_on,
    prepared_ref,
    rebase,
    rollback,
)
from tests.landing.conftest import APP, git

FIX = ("return sum(items)", "return sum(items or [])")
TRAILERS = {"Ephyra-Quest": "q1", "Ephyra-Revision": "1"}
BRANCH = "ephyra/q1/r1"


def status(worktree) -> str:
    return git(worktree, "status", "--porcelain")


def test_a_patch_is_replayed_onto_the_moved_base_and_its_worktree_follows(repos):
    _, head = repos.patch([FIX, ("amount * 0.2", "round(amount * 0.2, 2)")])
    moved = repos.push_as_person("hello ", "hi ", "Friendlier greeting")
    repos.fetch_into_mirror()
    worktree = repos.worktrees / "q1" / "r1"

    result = rebase(repos.mirror, BRANCH, onto=moved, head=head, worktree=worktree)

    assert isinstance(result, Rebased) and result.base == moved
    assert git(repos.mirror, "rev-parse", f"refs/heads/{BRANCH}") == result.head
    assert git(repos.mirror, "rev-list", "--count", f"{moved}..{result.head}") == "2"
    assert repos.message(result.head) == repos.message(head)
    text = (worktree / "app.py").read_text()  # the checkout is at the new head, clean
    assert "sum(items or [])" in text and '"hi "' in text and "round(" in text
    assert status(worktree) == ""
    # Asked again (a delivery after a crash), the rebase already done is the answer.
    again = rebase(repos.mirror, BRANCH, onto=moved, head=head, worktree=worktree)
    assert again == result


def test_a_rebase_that_conflicts_changes_nothing_and_names_the_files(repos):
    _, head = repos.patch([FIX])
    moved = repos.push_as_person("return sum(items)", "return sum(items, 0)", "Start at zero")
    repos.fetch_into_mirror()
    worktree = repos.worktrees / "q1" / "r1"

    result = rebase(repos.mirror, BRANCH, onto=moved, head=head, worktree=worktree)

    assert isinstance(result, Conflict) and result.files == ("app.py",)
    assert "conflicts in app.py" in result.detail
    assert git(repos.mirror, "rev-parse", f"refs/heads/{BRANCH}") == head
    assert git(worktree, "rev-parse", "HEAD") == head
    assert status(worktree) == ""  # no rebase left halfway, nothing to abort


def landed(repos) -> tuple[str, str]:
    base, head = repos.patch([FIX])
    result = land(
        repos.mirror,
        str(repos.remote),
        base_branch="main",
        expected_base=base,
        head=head,
        trailers=TRAILERS,
    )
    assert isinstance(result, Landed)
    return base, head


def rolling_back(repos, landed_commit: str, **kw):
    options = {"base_branch": "main", "landed_commit": landed_commit, "trailers": TRAILERS}
    return rollback(repos.mirror, str(repos.remote), **(options | kw))


def test_a_rollback_reverts_the_landed_patch_on_top_of_what_landed_since(repos):
    base, head = landed(repos)
    later = repos.push_as_person("hello ", "hi ", "Friendlier greeting")

    result = rolling_back(repos, head, patch_base=base)

    assert isinstance(result, RolledBack) and result.revert_commit == repos.tip()
    assert repos.parents(result.revert_commit) == [later]
    assert repos.read(result.revert_commit) == APP.replace("hello ", "hi ")
    message = repos.message(result.revert_commit)
    assert message.startswith(f'Revert "Fix q1 step 0"\n\nThis reverts commit {head}.\n\n')
    assert message.endswith("Ephyra-Quest: q1\nEphyra-Revision: 1")


def test_a_rollback_that_conflicts_leaves_the_base_alone_and_names_the_files(repos):
    base, head = landed(repos)
    later = repos.push_as_person("sum(items or [])", "sum(items or ())", "Tuples are fine")

    result = rolling_back(repos, head, patch_base=base)

    assert isinstance(result, Conflict) and result.files == ("app.py",)
    assert repos.tip() == later


def test_a_base_that_moves_while_the_revert_is_made_is_not_overwritten(repos):
    base, head = landed(repos)
    moved = []

    def someone_pushes_first():
        moved.append(repos.push_as_person("hello ", "hi ", "Friendlier greeting"))

    result = rolling_back(repos, head, patch_base=base, before_send=someone_pushes_first)

    assert result == BaseMoved(moved[0])
    assert repos.tip() == moved[0]
    # Asked again, it reverts on the new base.
    again = rolling_back(repos, head, patch_base=base)
    assert isinstance(again, RolledBack) and repos.parents(again.revert_commit) == moved


def test_a_change_a_person_reverted_by_hand_is_confirmed_not_reverted_twice(repos):
    base, head = landed(repos)
    git(repos.person, "pull", "-q", "--ff-only")
    git(repos.person, "revert", "--no-edit", head)
    git(repos.person, "push", "-q", "origin", "main")
    by_hand = repos.tip()

    result = rolling_back(repos, head, patch_base=base)

    assert result == RolledBack(by_hand, already=True)
    assert repos.tip() == by_hand


def test_a_second_rollback_under_the_same_key_finds_the_first_one(repos):
    base, head = landed(repos)
    ref = prepared_ref("q1:1:rollback:q1-e14:0")

    first = rolling_back(repos, head, patch_base=base, prepared_ref=ref)
    again = rolling_back(repos, head, patch_base=base, prepared_ref=ref)

    assert again == RolledBack(first.revert_commit, already=True)
    assert landed_on(
        repos.mirror, str(repos.remote), base_branch="main", commit=first.revert_commit
    )
    assert git(repos.remote, "rev-list", "--count", f"{head}..main") == "1"


def test_a_merge_landing_is_rolled_back_whole(repos):
    base, head = repos.patch([FIX, ("amount * 0.2", "round(amount * 0.2, 2)")])
    merged = land(
        repos.mirror,
        str(repos.remote),
        base_branch="main",
        expected_base=base,
        head=head,
        styles=("merge",),
        trailers=TRAILERS,
    )

    result = rolling_back(repos, merged.commit)  # the patch base: the merge's first parent

    assert isinstance(result, RolledBack)
    assert repos.read(result.revert_commit) == APP


def test_a_rollback_the_remote_refuses_is_refused_with_gits_words(repos):
    base, head = landed(repos)
    hook = repos.remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)

    result = rolling_back(repos, head, patch_base=base)

    assert isinstance(result, Refused) and result.reason == "rollback_refused"
    assert "pre-receive hook declined" in result.detail
    assert repos.tip() == head
