"""Reproduction on real repositories: real pytest runs through the real runner."""

from __future__ import annotations

import json
import sysconfig

import pytest

from ephyra.agent.inputs import Stopped, Workdir
from ephyra.agent.locate import bisect
from ephyra.agent.reproduce import (
    REPORTS_DIR,
    NotReproduced,
    Reproduction,
    narrow_argv,
    reproduce,
)
from ephyra.core.events import EVIDENCE_LIMIT, ReproductionFailed, ReproductionRecorded
from ephyra.policy.work import WorkLimits, WorkPolicy
from ephyra.runner import LocalRunner, SandboxRunner, prepare_worktree
from tests.agent.projects import PYTEST, PYTHON, Project, git, shop_files, zero_division_signal
from tests.agent.repos import NODE_ID, shop_history
from tests.runner.conftest import needs_sandbox

FIXED_CART = shop_files()["shop/cart.py"].replace(
    "return sum(prices) / len(prices) * len(prices)", "return sum(prices)"
)


@pytest.fixture
def shop(tmp_path) -> Project:
    return Project.make(tmp_path, shop_files())


def policy(**changes) -> WorkPolicy:
    return WorkPolicy(test=PYTEST, **changes)


def test_the_failing_test_that_matches_the_signal_is_the_reproduction(shop):
    workdir = shop.workdir()

    found = reproduce(workdir, policy(), zero_division_signal(), head=shop.head)

    assert isinstance(found, Reproduction)
    assert found.kind == "pytest"
    assert found.node_ids == ("tests/test_cart.py::test_total_of_an_empty_cart",)
    assert found.argv == (*PYTEST, "tests/test_cart.py::test_total_of_an_empty_cart")
    assert found.failure.exception_type == "ZeroDivisionError"
    assert found.failure.message == "division by zero"
    assert (found.failure.frame.file, found.failure.frame.function) == ("shop/cart.py", "total")
    assert found.head == shop.head
    # the suite, then the narrow command twice in a row
    assert [run["name"] for run in found.runs] == ["reproduce-03-confirm", "reproduce-04-confirm"]
    assert all(run["exit"] == 1 for run in found.runs)
    assert "failed twice in a row" in found.summary()
    assert "tests/test_cart.py::test_total_of_an_empty_cart" in found.summary()


def test_each_run_leaves_its_log_record_and_report_in_the_artifacts_and_none_in_the_worktree(
    shop,
):
    workdir = shop.workdir()

    reproduce(workdir, policy(), zero_division_signal(), head=shop.head)

    names = sorted(p.name for p in workdir.artifacts.iterdir())
    assert names == [
        f"reproduce-0{n}-{what}.{ext}"
        for n, what in ((2, "suite"), (3, "confirm"), (4, "confirm"))
        for ext in ("json", "log", "xml")
    ]
    assert not (workdir.worktree / REPORTS_DIR).exists()
    assert git(workdir.worktree, "status", "--porcelain") == ""


def test_the_reproduction_fails_at_the_head_and_passes_once_the_code_is_fixed(shop):
    workdir = shop.workdir()
    found = reproduce(workdir, policy(), zero_division_signal(), head=shop.head)

    failing = found.run(workdir)
    (workdir.worktree / "shop" / "cart.py").write_text(FIXED_CART)
    passing = found.run(workdir)

    assert failing is False
    assert passing is True


def test_the_reproduction_cannot_say_when_its_test_fails_another_way(shop):
    workdir = shop.workdir()
    found = reproduce(workdir, policy(), zero_division_signal(), head=shop.head)
    broken = FIXED_CART.replace("return sum(prices)", "raise KeyError('price')")
    (workdir.worktree / "shop" / "cart.py").write_text(broken)

    assert found.run(workdir) is None


def test_the_reproduction_survives_its_evidence_and_the_events_that_carry_it(shop):
    workdir = shop.workdir()
    found = reproduce(workdir, policy(), zero_division_signal(), head=shop.head)

    evidence = found.to_evidence()
    again = Reproduction.from_evidence(json.loads(json.dumps(evidence)))
    event = ReproductionRecorded(
        id="e-1", quest="q-1", at="2026-01-01T00:00:00Z", probe=found.command, evidence=evidence
    )

    assert again == found
    assert again.run(workdir) is False
    assert len(json.dumps(evidence)) < EVIDENCE_LIMIT
    assert event.evidence["node_ids"] == ["tests/test_cart.py::test_total_of_an_empty_cart"]


def test_a_failure_that_does_not_match_the_signal_is_not_a_reproduction(tmp_path):
    tests = """\
        from shop.cart import lookup


        def test_lookup_of_a_missing_item():
            assert lookup({}, "pear") == 0
        """
    shop = Project.make(tmp_path, shop_files(**{"tests/test_cart.py": tests}))
    workdir = shop.workdir()

    found = reproduce(workdir, policy(), zero_division_signal(), head=shop.head)

    assert isinstance(found, NotReproduced)
    assert found.code == "not_matched"
    summary = found.summary()
    assert "no run failed the way the signal did" in summary
    assert "tests/test_cart.py::test_lookup_of_a_missing_item: KeyError: 'pear'" in summary
    assert "the exception is KeyError, not ZeroDivisionError" in summary
    assert "raised from shop/cart.py in lookup, not /srv/app/shop/cart.py in total" in summary
    assert found.seen[0]["node_id"] == "tests/test_cart.py::test_lookup_of_a_missing_item"
    assert [run["name"] for run in found.runs] == ["reproduce-02-suite"]
    ReproductionFailed(
        id="e-1",
        quest="q-1",
        at="2026-01-01T00:00:00Z",
        reason=summary,
        evidence=found.to_evidence(),
    )


def test_the_same_exception_raised_from_another_function_does_not_match(tmp_path):
    cart = shop_files()["shop/cart.py"].replace("return items[key]", "return items[key] / 0")
    tests = """\
        from shop.cart import lookup


        def test_lookup():
            assert lookup({"a": 1}, "a") == 1
        """
    shop = Project.make(tmp_path, shop_files(**{"shop/cart.py": cart, "tests/test_cart.py": tests}))

    found = reproduce(shop.workdir(), policy(), zero_division_signal(), head=shop.head)

    assert isinstance(found, NotReproduced)
    assert "raised from shop/cart.py in lookup, not /srv/app/shop/cart.py in total" in (
        found.summary()
    )


def test_a_flaky_suite_that_fails_once_then_passes_is_reported_as_flaky(tmp_path):
    # The test fails the first time it runs in this worktree, then passes.
    tests = """\
        from pathlib import Path

        from shop.cart import total


        def test_total_of_an_empty_cart():
            marker = Path(__file__).with_name("ran-once")
            if not marker.exists():
                marker.write_text("")
                total([])
        """
    shop = Project.make(tmp_path, shop_files(**{"tests/test_cart.py": tests}))

    found = reproduce(shop.workdir(), policy(), zero_division_signal(), head=shop.head)

    assert isinstance(found, NotReproduced)
    assert found.code == "flaky"
    assert found.flaky
    assert "is flaky" in found.summary()
    assert "tests/test_cart.py::test_total_of_an_empty_cart matched the signal" in found.summary()
    assert [run["exit"] for run in found.runs] == [1, 0, 0]


def test_a_suite_that_hangs_is_killed_at_its_limit_and_reported(tmp_path):
    tests = """\
        import time


        def test_waits_forever():
            time.sleep(600)
        """
    shop = Project.make(tmp_path, shop_files(**{"tests/test_cart.py": tests}))
    work = policy(limits=WorkLimits(test_seconds=2))

    found = reproduce(shop.workdir(), work, zero_division_signal(), head=shop.head)

    assert isinstance(found, NotReproduced)
    assert found.code == "not_matched"
    assert "was killed at its limit of 2 s" in found.summary()
    assert found.runs[0]["timed_out"] is True


def test_the_probe_is_tried_when_the_suite_does_not_reproduce(tmp_path):
    tests = """\
        from shop.cart import total


        def test_total_of_two_prices():
            assert total([2, 3]) == 5
        """
    shop = Project.make(tmp_path, shop_files(**{"tests/test_cart.py": tests}))
    probe = [PYTHON, "-c", "from shop.cart import total; total([])"]
    workdir = shop.workdir()

    found = reproduce(workdir, policy(probe=probe), zero_division_signal(), head=shop.head)

    assert isinstance(found, Reproduction)
    assert found.kind == "probe"
    assert found.argv == tuple(probe)
    assert found.node_ids == ()
    assert (found.failure.frame.file, found.failure.frame.function) == ("shop/cart.py", "total")
    assert [run["name"] for run in found.runs] == ["reproduce-03-probe", "reproduce-04-probe"]
    assert found.run(workdir) is False
    (workdir.worktree / "shop" / "cart.py").write_text(FIXED_CART)
    assert found.run(workdir) is True


def test_a_probe_that_fails_another_way_is_reported_with_what_it_printed(shop):
    probe = [PYTHON, "-c", "raise SystemExit('no such page')"]
    work = WorkPolicy(probe=probe)

    found = reproduce(shop.workdir(), work, zero_division_signal(), head=shop.head)

    assert isinstance(found, NotReproduced)
    assert "the probe" in found.summary()
    assert "exited 1; its output shows no exception" in found.summary()


def test_a_test_command_that_is_not_pytest_is_judged_by_its_exit_status_and_output(shop):
    command = [PYTHON, "-c", "from shop.cart import total; total([])"]

    found = reproduce(
        shop.workdir(), WorkPolicy(test=command), zero_division_signal(), head=shop.head
    )

    assert isinstance(found, Reproduction)
    assert found.kind == "command"
    assert found.failure.exception_type == "ZeroDivisionError"


def test_a_failure_that_shows_only_with_the_rest_of_the_suite_makes_the_suite_the_reproduction(
    tmp_path,
):
    # test_b fails only after test_a emptied the shared cart.
    tests = """\
        from shop.cart import total

        CART = [2, 3]


        def test_a_empties_the_cart():
            CART.clear()


        def test_b_totals_the_cart():
            total(CART)
        """
    shop = Project.make(tmp_path, shop_files(**{"tests/test_cart.py": tests}))
    workdir = shop.workdir()

    found = reproduce(workdir, policy(), zero_division_signal(), head=shop.head)

    assert isinstance(found, Reproduction)
    assert found.argv == tuple(PYTEST)
    assert found.node_ids == ("tests/test_cart.py::test_b_totals_the_cart",)
    assert "only with the rest of the suite" in found.summary()
    assert found.run(workdir) is False


def test_a_setup_that_fails_at_the_head_is_said(shop):
    work = policy(setup=[[PYTHON, "-c", "import sys; sys.exit('no wheel for numpy')"]])

    found = reproduce(shop.workdir(), work, zero_division_signal(), head=shop.head)

    assert isinstance(found, NotReproduced)
    assert found.code == "setup_failed"
    assert "no wheel for numpy" in found.summary()
    assert found.runs[0]["name"] == "reproduce-01-prepare-setup"


def test_a_policy_without_test_or_probe_has_nothing_to_reproduce_with(shop):
    found = reproduce(shop.workdir(), WorkPolicy(), zero_division_signal(), head=shop.head)

    assert isinstance(found, NotReproduced)
    assert found.code == "no_command"
    assert found.runs == ()


def test_a_step_asked_to_stop_raises_stopped_before_running_anything(shop):
    workdir = shop.workdir(should_stop=lambda: True)

    with pytest.raises(Stopped):
        reproduce(workdir, policy(), zero_division_signal(), head=shop.head)

    assert list(workdir.artifacts.iterdir()) == []


def test_the_narrow_command_drops_the_suites_paths_but_keeps_option_values(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "pytest.ini").write_text("")
    test = (PYTHON, "-m", "pytest", "tests", "-c", "pytest.ini", "-x", "tests/test_a.py::test_x")

    narrow = narrow_argv(test, ("tests/test_b.py::test_y",), tmp_path)

    assert narrow == (PYTHON, "-m", "pytest", "-c", "pytest.ini", "-x", "tests/test_b.py::test_y")


@needs_sandbox
def test_a_sandboxed_suite_reports_through_the_worktree_and_reproduces(shop):
    # The sandbox sees the system's Python and, read-only, this one's packages (pytest).
    site = sysconfig.get_paths()["purelib"]
    workdir = shop.workdir(runner=SandboxRunner(read_only_paths=[site]), env={"PYTHONPATH": site})
    work = WorkPolicy(test=["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"])

    found = reproduce(workdir, work, zero_division_signal(), head=shop.head)

    assert isinstance(found, Reproduction), found.summary()
    assert found.node_ids == ("tests/test_cart.py::test_total_of_an_empty_cart",)
    assert (workdir.artifacts / "reproduce-04-confirm.xml").is_file()
    assert found.run(workdir) is False


def test_a_run_that_turns_the_report_directory_into_a_link_out_is_not_read_or_followed(tmp_path):
    # The project's test replaces Ephyra's report directory with a link to a directory
    # beside the worktree: nothing there is deleted, and no report is read through it.
    tests = """\
        import os
        import shutil
        from pathlib import Path

        ROOT = Path(__file__).parents[1]


        def test_moves_the_reports():
            outside = ROOT.parent / "outside"
            outside.mkdir(exist_ok=True)
            (outside / "keep.txt").write_text("mine")
            shutil.rmtree(ROOT / ".ephyra-reports")
            os.symlink(outside, ROOT / ".ephyra-reports")
        """
    shop = Project.make(tmp_path, shop_files(**{"tests/test_cart.py": tests}))
    workdir = shop.workdir()

    found = reproduce(workdir, policy(), zero_division_signal(), head=shop.head)

    assert isinstance(found, NotReproduced)
    assert "left a symbolic link where pytest's report goes" in found.summary()
    assert (workdir.worktree.parent / "outside" / "keep.txt").read_text() == "mine"
    assert not (workdir.worktree / REPORTS_DIR).exists()
    assert not list(workdir.artifacts.glob("*.xml"))


def test_the_reproduction_drives_bisect_to_the_commit_that_broke_the_function(tmp_path):
    # The join with locating: the shop of tests/agent/repos.py, reproduced at its head from
    # its production signal, then bisected with the reproduction rebuilt from its evidence.
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15)
    mirror = shop.mirror(tmp_path / "mirror.git")
    worktree = prepare_worktree(mirror, tmp_path / "data" / "worktrees", "q-1", 1, shop.head)
    (tmp_path / "artifacts").mkdir()
    workdir = Workdir(worktree.path, tmp_path / "artifacts", LocalRunner(), {}, lambda: False)
    work = WorkPolicy(setup=[[PYTHON, "tools/setup.py"]], test=PYTEST)

    found = reproduce(workdir, work, shop.signal(), head=shop.head)
    location = bisect(
        workdir,
        work,
        Reproduction.from_evidence(found.to_evidence()),
        good=shop.main[0],
        bad=shop.head,
    )

    assert found.node_ids == (NODE_ID,)
    assert found.failure.exception_type == "KeyError"
    assert location.culprit is not None
    assert location.culprit.sha == shop.culprit
