"""Landing an approved patch on a plain Git remote: a compare-and-swap on the base's expected
commit, in the style the policy names, with Ephyra's trailers; never a force."""

from __future__ import annotations

import os
import stat

import pytest

from ephyra.landing import BaseMoved, Landed, NoAnswer, Refused, land, landed_on, prepared_ref
from tests.landing.conftest import git

TRAILERS = {"Ephyra-Quest": "q1", "Ephyra-Revision": "1", "Ephyra-Proof": "sha256:" + "9" * 64}
TRAILER_LINES = "Ephyra-Quest: q1\nEphyra-Revision: 1\nEphyra-Proof: sha256:" + "9" * 64
FIX = ("return sum(items)", "return sum(items or [])")


def landing(repos, base: str, head: str, **kw):
    options = {"base_branch": "main", "expected_base": base, "head": head, "trailers": TRAILERS}
    return land(repos.mirror, str(repos.remote), **(options | kw))


def test_a_patch_that_descends_from_the_base_fast_forwards_it_with_the_reviewed_commit(repos):
    base, head = repos.patch([FIX])

    result = landing(repos, base, head)

    assert result == Landed(head, "fast-forward")
    assert repos.tip() == head  # the very commit that was proven and reviewed
    assert "Ephyra-Quest: q1\nEphyra-Revision: 1" in repos.message(head)
    # The mirror shows the remote's base as it now is: the next quest starts from it.
    assert git(repos.mirror, "rev-parse", "refs/heads/main") == head


def test_a_base_that_moved_after_approval_is_left_as_it_is_and_reported(repos):
    base, head = repos.patch([FIX])
    moved = repos.push_as_person("hello ", "hi ", "Friendlier greeting")

    result = landing(repos, base, head)

    assert result == BaseMoved(moved)
    assert repos.tip() == moved
    assert git(repos.remote, "branch", "--contains", moved) == "* main"
    assert landed_on(repos.mirror, str(repos.remote), base_branch="main", commit=head) is False


def test_a_push_between_the_check_and_the_send_loses_the_lease_and_is_never_forced(repos):
    base, head = repos.patch([FIX])
    moved = []

    def someone_pushes_first():
        moved.append(repos.push_as_person("hello ", "hi ", "Friendlier greeting"))

    result = landing(repos, base, head, before_send=someone_pushes_first)

    assert result == BaseMoved(moved[0])
    assert repos.tip() == moved[0]  # a plain `git push --force` would have dropped it


def test_the_lease_holds_even_where_a_plain_push_would_fast_forward(repos):
    # Someone rewound the remote's main to an older commit: the patch fast-forwards from there,
    # so a plain push would be taken. The base is not the one the patch was proven on.
    first = repos.tip()
    approved = repos.push_as_person("hello ", "hi ", "Friendlier greeting")
    repos.fetch_into_mirror()
    base, head = repos.patch([FIX])
    assert base == approved
    git(repos.remote, "update-ref", "refs/heads/main", first)

    result = landing(repos, base, head)

    assert result == BaseMoved(first)
    assert repos.tip() == first


def test_a_merge_lands_a_merge_commit_of_the_patch_that_carries_the_trailers(repos):
    base, head = repos.patch([FIX])

    result = landing(repos, base, head, styles=("merge",), source="ephyra/q1/r1")

    assert isinstance(result, Landed) and result.style == "merge"
    assert repos.tip() == result.commit
    assert repos.parents(result.commit) == [base, head]
    message = repos.message(result.commit)
    assert message.startswith("Merge ephyra/q1/r1\n\nFix q1 step 0\n\n")
    assert message.endswith(TRAILER_LINES)
    assert repos.read(result.commit) == repos.read(head)


def test_a_rebase_replays_the_patch_onto_the_base_and_its_last_commit_carries_the_trailers(
    repos,
):
    base, head = repos.patch([FIX, ("amount * 0.2", "round(amount * 0.2, 2)")])

    result = landing(repos, base, head, styles=("rebase",))

    assert isinstance(result, Landed) and result.style == "rebase"
    (first,) = repos.parents(result.commit)
    assert repos.parents(first) == [base]
    assert repos.message(first) == repos.message(f"{head}~1")  # replayed as it was
    # The trailers the patch commit had are not repeated, the proof's is added.
    assert repos.message(result.commit) == f"Fix q1 step 1\n\n{TRAILER_LINES}"
    assert git(repos.remote, "log", "-1", "--format=%an|%cn", result.commit) == "Dev|Ephyra"
    assert repos.read(result.commit) == repos.read(head, repo=repos.mirror)


def test_a_patch_that_does_not_fast_forward_is_refused_unless_the_policy_allows_another_style(
    repos,
):
    _, head = repos.patch([FIX])
    moved = repos.push_as_person("hello ", "hi ", "Friendlier greeting")
    repos.fetch_into_mirror()  # the quest was told: its base is now `moved`

    refused = landing(repos, moved, head)

    assert isinstance(refused, Refused) and refused.reason == "not_fast_forward"
    assert "does not descend from the base" in refused.detail
    assert "the policy allows no other style (landing.allow)" in refused.detail
    assert repos.tip() == moved

    merged = landing(repos, moved, head, styles=("fast-forward", "merge"))

    assert isinstance(merged, Landed) and merged.style == "merge"
    assert repos.parents(merged.commit) == [moved, head]
    assert 'return "hi " + name' in repos.read(merged.commit)
    assert "return sum(items or [])" in repos.read(merged.commit)


def test_a_merge_that_conflicts_is_refused_with_the_files(repos):
    _, head = repos.patch([FIX])
    moved = repos.push_as_person("return sum(items)", "return sum(items, 0)", "Start at zero")
    repos.fetch_into_mirror()

    refused = landing(repos, moved, head, styles=("fast-forward", "merge"))

    assert refused == Refused(
        "merge_conflict",
        f"fast-forward: the patch {head[:12]} does not descend from the base {moved[:12]}; "
        "merge: merging the patch conflicts in app.py",
        ("app.py",),
    )
    assert repos.tip() == moved


def test_a_push_the_remote_refuses_leaves_it_unchanged_with_gits_words(repos):
    base, head = repos.patch([FIX])
    hook = repos.remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'main is protected' >&2\nexit 1\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)

    result = landing(repos, base, head)

    assert result == Refused(
        "landing_refused",
        "the remote refused the push: [remote rejected] (pre-receive hook declined)",
    )
    assert repos.tip() == base


def test_a_second_attempt_under_the_same_key_pushes_the_same_commit_and_finds_it_landed(repos):
    base, head = repos.patch([FIX])
    ref = prepared_ref("q1:1:land:q1-e12:0")

    first = landing(repos, base, head, styles=("merge",), prepared_ref=ref)
    again = landing(repos, base, head, styles=("merge",), prepared_ref=ref)

    assert again == Landed(first.commit, "merge", already=True)
    assert repos.tip() == first.commit
    assert git(repos.remote, "rev-list", "--count", "--merges", "main") == "1"


def test_the_check_says_whether_the_remotes_base_holds_a_commit(repos, tmp_path):
    base, head = repos.patch([FIX])
    check = {"base_branch": "main", "commit": head}

    assert landed_on(repos.mirror, str(repos.remote), **check) is False
    landing(repos, base, head)
    assert landed_on(repos.mirror, str(repos.remote), **check) is True
    later = repos.push_as_person("hello ", "hi ", "Friendlier greeting")
    assert later != head
    assert landed_on(repos.mirror, str(repos.remote), **check) is True  # in its history
    gone = str(tmp_path / "nowhere.git")
    assert landed_on(repos.mirror, gone, **check) is None
    assert landed_on(repos.mirror, str(repos.remote), base_branch="release", commit=head) is False


def test_a_push_that_gets_no_answer_raises_and_the_check_settles_it(repos):
    base, head = repos.patch([FIX])
    hook = repos.remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nsleep 30\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)

    with pytest.raises(NoAnswer) as raised:
        landing(repos, base, head, timeout=1)

    assert raised.value.sent is True
    os.unlink(hook)
    assert landed_on(repos.mirror, str(repos.remote), base_branch="main", commit=head) is False
    assert repos.tip() == base


def test_a_remote_that_cannot_be_reached_raises_before_anything_is_sent(repos, tmp_path):
    base, head = repos.patch([FIX])
    gone = str(tmp_path / "nowhere.git")

    with pytest.raises(NoAnswer) as raised:
        land(repos.mirror, gone, base_branch="main", expected_base=base, head=head, trailers={})

    assert raised.value.sent is False
    assert "nowhere.git" in str(raised.value)
