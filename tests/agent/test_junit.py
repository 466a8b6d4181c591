"""pytest's JUnit XML report read back, from real pytest runs of a small project."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from ephyra.agent.junit import (
    ReportUnreadable,
    node_id_of,
    read_report,
    report_arguments,
    runs_pytest,
)
from tests.agent.projects import PYTEST

TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"

FILES = {
    "shop/__init__.py": "",
    "shop/cart.py": """\
        class CartError(Exception):
            pass


        def total(prices):
            return sum(prices) / len(prices)


        def check(cart_id):
            raise CartError(f"cart {cart_id} at 0x7f3a12 is 'broken'")


        def login(token):
            raise PermissionError(f"bad token {token}")


        def checkout():
            try:
                total([])
            except ZeroDivisionError as exc:
                raise RuntimeError("checkout failed") from exc
        """,
    "tests/__init__.py": "",
    "tests/test_cart.py": f"""\
        import pytest

        from shop.cart import check, checkout, login, total


        def test_passes():
            assert total([2]) == 2


        def test_divides_by_zero():
            total([])


        def test_asserts():
            assert total([2, 4]) == 4


        class TestCarts:
            @pytest.mark.parametrize("cart_id", [1, 2])
            def test_check(self, cart_id):
                check(cart_id)


        @pytest.fixture
        def broken():
            raise OSError("no database")


        def test_with_a_broken_fixture(broken):
            pass


        @pytest.fixture
        def leaky():
            yield
            raise ValueError("teardown failed")


        def test_fails_then_its_teardown_fails(leaky):
            assert False


        @pytest.mark.skip(reason="later")
        def test_skipped():
            pass


        def test_leaks_a_token():
            login("{TOKEN}")


        def test_chained():
            checkout()
        """,
}


def run_pytest(root: Path, *extra: str) -> Path:
    report = root / "report.xml"
    subprocess.run(
        [*PYTEST, *report_arguments(report), *extra],
        cwd=root,
        capture_output=True,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    return report


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


@pytest.fixture(scope="module")
def report(project):
    return read_report(run_pytest(project), project)


def case(report, node_id):
    return next(c for c in report.cases if c.node_id == node_id)


def test_every_test_is_read_with_its_node_id_and_outcome(report):
    assert {c.node_id: c.outcome for c in report.cases} == {
        "tests/test_cart.py::test_passes": "passed",
        "tests/test_cart.py::test_divides_by_zero": "failed",
        "tests/test_cart.py::test_asserts": "failed",
        "tests/test_cart.py::TestCarts::test_check[1]": "failed",
        "tests/test_cart.py::TestCarts::test_check[2]": "failed",
        "tests/test_cart.py::test_with_a_broken_fixture": "error",
        "tests/test_cart.py::test_fails_then_its_teardown_fails": "error",
        "tests/test_cart.py::test_skipped": "skipped",
        "tests/test_cart.py::test_leaks_a_token": "failed",
        "tests/test_cart.py::test_chained": "failed",
    }


def test_an_exception_in_the_code_gives_its_type_message_and_innermost_frame(report):
    failure = case(report, "tests/test_cart.py::test_divides_by_zero").failure

    assert failure.exception_type == "ZeroDivisionError"
    assert failure.message == "division by zero"
    assert (failure.frame.file, failure.frame.line, failure.frame.function) == (
        "shop/cart.py",
        6,
        "total",
    )
    assert failure.node_id == "tests/test_cart.py::test_divides_by_zero"


def test_an_assertion_in_the_test_is_raised_from_the_test(report):
    failure = case(report, "tests/test_cart.py::test_asserts").failure

    assert failure.exception_type == "AssertionError"
    assert failure.message.startswith("assert 3.0 == 4")
    assert (failure.frame.file, failure.frame.function) == ("tests/test_cart.py", "test_asserts")


def test_a_projects_own_exception_is_named_with_its_module(report):
    failure = case(report, "tests/test_cart.py::TestCarts::test_check[2]").failure

    assert failure.exception_type == "shop.cart.CartError"
    assert failure.message == "cart 2 at 0x7f3a12 is 'broken'"
    assert failure.frame.function == "check"


def test_a_fixture_that_fails_is_an_error_raised_from_the_fixture(report):
    failure = case(report, "tests/test_cart.py::test_with_a_broken_fixture").failure

    assert failure.exception_type == "OSError"
    assert failure.message == "no database"
    assert failure.frame.function == "broken"


def test_a_chained_exception_is_read_as_the_one_raised_last(report):
    failure = case(report, "tests/test_cart.py::test_chained").failure

    assert failure.exception_type == "RuntimeError"
    assert failure.message == "checkout failed"
    assert failure.frame.function == "checkout"


def test_a_module_that_fails_to_import_is_an_error_read_from_pytests_own_lines(tmp_path):
    # pytest stops at a collection error: the module is the only case of the report.
    (tmp_path / "test_broken_import.py").write_text("import not_a_module\n")

    report = read_report(run_pytest(tmp_path), tmp_path)

    (only,) = report.cases
    assert (only.node_id, only.outcome) == ("test_broken_import.py", "error")
    failure = only.failure

    assert failure.exception_type == "ModuleNotFoundError"
    assert failure.message == "No module named 'not_a_module'"


def test_a_secret_in_a_failure_message_is_redacted(report):
    failure = case(report, "tests/test_cart.py::test_leaks_a_token").failure

    assert TOKEN not in failure.message
    assert failure.message == "bad token [redacted:github-token]"


def test_a_tests_worst_outcome_is_its_outcome(report):
    assert report.outcome("tests/test_cart.py::test_fails_then_its_teardown_fails") == "error"
    assert report.outcome("tests/test_cart.py::test_passes") == "passed"
    assert report.outcome("tests/test_cart.py::not_there") is None


def test_a_test_that_failed_and_then_errored_in_its_teardown_shows_both(report):
    node_id = "tests/test_cart.py::test_fails_then_its_teardown_fails"

    both = [c for c in report.failures if c.node_id == node_id]

    assert [(c.outcome, c.failure.exception_type) for c in both] == [
        ("failed", "AssertionError"),
        ("error", "ValueError"),
    ]
    assert len(report.failures) == 9


def test_without_the_file_attribute_the_node_id_is_found_from_the_classname(project):
    # The xunit2 family (pytest's default) leaves the file out.
    report = read_report(run_pytest(project, "-o", "junit_family=xunit2"), project)

    assert "tests/test_cart.py::TestCarts::test_check[1]" in {c.node_id for c in report.cases}


def test_a_node_id_in_a_directory_with_dots_is_rebuilt_from_the_file():
    node_id = node_id_of("tests/v1.2/test_x.py", "tests.v1.2.test_x.TestA", "test_b[x.y]", Path())

    assert node_id == "tests/v1.2/test_x.py::TestA::test_b[x.y]"


def test_a_missing_report_is_unreadable(tmp_path):
    with pytest.raises(ReportUnreadable, match="pytest wrote no report"):
        read_report(tmp_path / "nothing.xml", tmp_path)


def test_a_report_that_is_not_xml_is_unreadable(tmp_path):
    (tmp_path / "r.xml").write_text("collected 3 items\n")

    with pytest.raises(ReportUnreadable, match="not XML"):
        read_report(tmp_path / "r.xml", tmp_path)


def test_xml_that_is_not_junit_is_unreadable(tmp_path):
    (tmp_path / "r.xml").write_text("<html><body/></html>")

    with pytest.raises(ReportUnreadable, match="not JUnit XML"):
        read_report(tmp_path / "r.xml", tmp_path)


def test_an_entity_expansion_bomb_is_refused(tmp_path):
    entities = "".join(
        f'<!ENTITY e{n} "{f"&e{n - 1};" * 10 if n else "x" * 10}">' for n in range(10)
    )
    (tmp_path / "r.xml").write_text(
        f'<?xml version="1.0"?><!DOCTYPE t [{entities}]><testsuites>&e9;</testsuites>'
    )

    with pytest.raises(ReportUnreadable):
        read_report(tmp_path / "r.xml", tmp_path)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["pytest", "-q"], True),
        ([".venv/bin/pytest"], True),
        (["python", "-m", "pytest", "tests"], True),
        (["uv", "run", "py.test"], True),
        (["sh", "-c", "pip install . && pytest"], False),
        (["python", "-m", "unittest"], False),
        (["pytest-watch"], False),
    ],
)
def test_a_command_runs_pytest_when_one_of_its_words_is_pytest(argv, expected):
    assert runs_pytest(argv) is expected
