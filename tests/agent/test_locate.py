"""Locating the culprit on real repositories with the real local runner: the last good commit,
then a first-parent bisect with the shop's failing test as the reproduction."""

from __future__ import annotations

import math
import subprocess
from datetime import UTC, datetime

import pytest

from ephyra.agent import LocateError, Stopped, bisect, known_good
from ephyra.agent.gitcli import first_parents, head_ref
from ephyra.core.events import ReproductionRecorded
from tests.agent.repos import (
    node_reproduction,
    shop_history,
    shop_policy,
    workdir_for,
)


def bound(commits: int) -> int:
    return math.ceil(math.log2(commits)) + 2


def test_bisect_finds_the_commit_that_broke_the_function_within_the_bound(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15)
    workdir = workdir_for(shop, tmp_path)

    found = bisect(
        workdir,
        shop_policy(),
        node_reproduction(shop),
        good=shop.main[0],
        bad=shop.head,
        signal=shop.signal(),
    )

    assert found.culprit is not None and found.culprit.sha == shop.culprit
    assert found.commits == 23
    assert found.test_runs <= bound(23)
    assert found.plan() == (
        f"revert {shop.culprit[:12]} (Read the quantity of each line directly, Rita Regress), "
        "which changed shop/cart.py in line_total()"
    )
    assert f"{found.test_runs} test runs (bound ⌈log2(23)⌉ + 2 = 7)" in found.summary()
    # every test run left its record, named within the step
    records = sorted(p.name for p in workdir.artifacts.glob("bisect-*-reproduce.json"))
    assert len(records) == found.test_runs
    assert [t.verdict for t in found.tested].count("bad") >= 1


def test_the_location_is_evidence_the_reproduction_event_accepts(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)
    found = bisect(
        workdir,
        shop_policy(),
        node_reproduction(shop),
        good=shop.main[0],
        bad=shop.head,
        signal=shop.signal(),
    )

    event = ReproductionRecorded(
        id="e-1",
        quest="q-1",
        at=datetime.now(UTC),
        probe=shop.node_id,
        plan=found.plan(),
        evidence=found.to_evidence(),
    )

    assert event.evidence["culprit"]["sha"] == shop.culprit
    assert all(run["digest"].startswith("sha256:") for t in found.tested for run in t.runs)
    assert len(found.summary()) <= 4000


def test_known_good_walks_back_in_doubling_steps_until_the_reproduction_passes(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15)
    workdir = workdir_for(shop, tmp_path)
    chain = first_parents(workdir.worktree, shop.head)  # newest first

    found = known_good(
        workdir, shop_policy(), node_reproduction(shop), head=shop.head, deployed_before=None
    )

    # the culprit is 9 commits back: 1, 2, 4 and 8 still fail, 16 passes
    assert [t.commit for t in found.tested] == [chain[1], chain[2], chain[4], chain[8], chain[16]]
    assert found.commit == chain[16] and found.source == "walk_back" and found.distance == 16
    assert found.bad == chain[8]  # the nearest failing commit: bisect starts there
    located = bisect(
        workdir, shop_policy(), node_reproduction(shop), good=found.commit, bad=found.bad
    )
    assert located.culprit is not None and located.culprit.sha == shop.culprit
    assert located.test_runs <= bound(located.commits)


def test_known_good_takes_the_deployment_before_the_first_sighting_first(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15)
    workdir = workdir_for(shop, tmp_path)

    found = known_good(
        workdir,
        shop_policy(known_good=shop.main[0]),
        node_reproduction(shop),
        head=shop.head,
        deployed_before=shop.main[10],
    )

    assert found.commit == shop.main[10] and found.source == "deployment"
    assert found.test_runs == 1
    assert "the deployment before the error was first seen" in found.summary()


def test_a_known_good_ref_where_the_test_fails_is_noted_and_the_walk_back_goes_on(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15)
    workdir = workdir_for(shop, tmp_path)

    found = known_good(
        workdir,
        shop_policy(known_good=shop.main[20]),
        node_reproduction(shop),
        head=shop.head,
        deployed_before="v9.9-not-here",
    )

    assert found.source == "walk_back" and found.commit is not None
    summary = found.summary()
    assert (
        "the deployment before the first sighting (v9.9-not-here) is not in the repository"
        in summary
    )
    assert (
        f"the policy's known_good ({shop.main[20]}) is not good: the reproduction fails there"
        in summary
    )


def test_a_history_with_merges_is_bisected_along_its_first_parents(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15, merges=True)
    workdir = workdir_for(shop, tmp_path)

    found = bisect(
        workdir, shop_policy(), node_reproduction(shop), good=shop.main[0], bad=shop.head
    )

    assert found.culprit is not None and found.culprit.sha == shop.culprit
    assert found.commits == 23  # the side branches' commits are not counted, nor tested
    assert {t.commit for t in found.tested} <= set(shop.main)
    assert found.test_runs <= bound(23)


def test_a_regression_that_came_through_a_merge_is_found_as_that_merge(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15, merges=True, culprit_merged=True)
    workdir = workdir_for(shop, tmp_path)

    found = bisect(
        workdir,
        shop_policy(),
        node_reproduction(shop),
        good=shop.main[0],
        bad=shop.head,
        signal=shop.signal(),
    )

    assert found.culprit is not None and found.culprit.sha == shop.culprit != shop.breaking
    assert found.culprit.is_merge and found.mainline == 1
    assert "a merge, reverted against its first parent" in found.plan()
    assert "which changed shop/cart.py in line_total()" in found.plan()


def test_a_commit_whose_setup_fails_is_skipped_and_the_culprit_still_found(tmp_path):
    # 23 commits after the first: the first midpoint is main[12], whose setup fails
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15, setup_fails=(12, 13))
    workdir = workdir_for(shop, tmp_path)

    found = bisect(
        workdir, shop_policy(), node_reproduction(shop), good=shop.main[0], bad=shop.head
    )

    assert found.culprit is not None and found.culprit.sha == shop.culprit
    skipped = [t for t in found.tested if t.verdict == "skip"]
    assert skipped and {t.commit for t in skipped} <= set(shop.setup_fails)
    assert all(not t.test_run for t in skipped)  # no test ran where the setup failed
    assert "No matching distribution found for no-such-package" in skipped[0].reason
    assert found.test_runs <= bound(23)


def test_when_only_skipped_commits_are_left_the_culprit_is_one_of_them(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15, setup_fails=(14,))
    workdir = workdir_for(shop, tmp_path)
    # the commit before the culprit cannot be set up: the culprit cannot be told from it
    found = bisect(
        workdir, shop_policy(), node_reproduction(shop), good=shop.main[10], bad=shop.main[16]
    )

    assert found.culprit is None
    assert [c.sha for c in found.candidates] == [shop.main[13], shop.culprit]
    assert found.plan() == ""
    assert found.summary().startswith("No single culprit")


def test_setup_is_reused_across_commits_whose_setup_files_did_not_change(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15)
    workdir = workdir_for(shop, tmp_path)

    found = bisect(
        workdir, shop_policy(), node_reproduction(shop), good=shop.main[0], bad=shop.head
    )

    setups = sorted(workdir.artifacts.glob("bisect-*-setup.json"))
    assert len(setups) == sum(t.setup == "ran" for t in found.tested) < len(found.tested)
    assert {t.setup for t in found.tested} == {"ran", "reused"}


def test_the_worktree_is_back_on_its_branch_after_locating(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)

    known_good(
        workdir, shop_policy(), node_reproduction(shop), head=shop.head, deployed_before=None
    )
    bisect(workdir, shop_policy(), node_reproduction(shop), good=shop.main[0], bad=shop.head)

    assert head_ref(workdir.worktree) == "refs/heads/ephyra/q-1/r1"
    tip = subprocess.run(
        ["git", "-C", str(workdir.worktree), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert tip == shop.head


def test_no_good_commit_within_the_walk_back_bound_says_so(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=10)
    workdir = workdir_for(shop, tmp_path)

    found = known_good(
        workdir,
        shop_policy(walk_back=6),
        node_reproduction(shop),
        head=shop.head,
        deployed_before=None,
    )

    assert found.commit is None and found.source is None
    assert [t.verdict for t in found.tested] == ["bad", "bad", "bad", "bad"]  # 1, 2, 4, 6 back
    assert "walk_back bound (6 first-parent commits); raise it" in found.summary()


def test_a_shallow_mirror_stops_the_walk_at_its_boundary_and_says_so(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15)
    workdir = workdir_for(shop, tmp_path, depth=5)

    found = known_good(
        workdir,
        shop_policy(),
        node_reproduction(shop),
        head=shop.head,
        deployed_before=shop.last_good,
    )

    assert found.commit is None
    summary = found.summary()
    assert "is not in the repository (the mirror is shallow" in summary
    assert "The walk reached the shallow mirror's boundary, 4 first-parent commits back" in summary
    assert "git fetch --unshallow" in summary
    with pytest.raises(LocateError, match="the mirror is shallow"):
        bisect(workdir, shop_policy(), node_reproduction(shop), good=shop.last_good, bad=shop.head)


def test_bisect_refuses_commits_that_are_not_one_before_the_other(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)

    with pytest.raises(LocateError, match="is not an ancestor of"):
        bisect(workdir, shop_policy(), node_reproduction(shop), good=shop.head, bad=shop.main[0])
    with pytest.raises(LocateError, match="no commit 'nope'"):
        bisect(workdir, shop_policy(), node_reproduction(shop), good="nope", bad=shop.head)


def test_a_stop_request_between_runs_stops_the_bisect_and_restores_the_branch(tmp_path):
    # the caller asks to stop once the first test run has left its record
    first = tmp_path / "artifacts" / "q-1" / "bisect-01-reproduce.json"
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path, should_stop=first.exists)

    with pytest.raises(Stopped):
        bisect(workdir, shop_policy(), node_reproduction(shop), good=shop.main[0], bad=shop.head)

    assert [p.name for p in workdir.artifacts.glob("bisect-*-reproduce.json")] == [first.name]
    assert head_ref(workdir.worktree) == "refs/heads/ephyra/q-1/r1"


def test_the_benchmark_finds_the_injected_culprit_within_the_bound_at_a_small_size():
    from benchmarks import locate as bench

    report = bench.run([24], 0.0, echo=False)

    assert report.failures == []
    steps = [row.step for row in report.rows]
    assert steps == ["generate", "research", "reproduction", "known good", "bisect"]
    assert "culprit found: True" in report.rows[-1].note
    assert "| 24 | bisect |" in report.text


def test_a_walk_back_through_commits_whose_setup_fails_says_why_each_was_skipped(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15, setup_fails=(22, 23))
    workdir = workdir_for(shop, tmp_path)

    found = known_good(
        workdir,
        shop_policy(walk_back=2),
        node_reproduction(shop),
        head=shop.head,
        deployed_before=None,
    )

    assert found.commit is None
    assert [t.verdict for t in found.tested] == ["skip", "skip"]
    assert f"  {shop.main[22][:12]} skipped: the setup failed: the setup command" in found.summary()
    assert "No matching distribution found for no-such-package" in found.summary()
