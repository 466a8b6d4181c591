"""pytest's JUnit XML report, read into the failing tests and how each failed.

When a workspace's ``test`` command runs pytest, a run adds ``report_arguments(path)``: a
JUnit XML report at ``path`` in the ``xunit1`` family (it names each test's file, which the
default ``xunit2`` leaves out, so the node id can be rebuilt) and ``--tb=native`` (each
failure's text is then a plain Python traceback: its frames name their functions, which
pytest's own styles do not print in a form one can read back). ``read_report`` reads the file:

- every test case with its node id (``tests/test_cart.py::TestCart::test_check[1]``) and
  outcome: ``passed``, ``failed`` (an assertion or exception in the test), ``error`` (in a
  fixture's setup or teardown, or the module failed to import) or ``skipped``;
- for each failed or errored one: the exception type, the message (redacted) and the
  innermost frame inside the worktree (see ``matching``).

The report is written by the project's own test run, so it is read as untrusted input: at
most ``MAX_REPORT_BYTES``, with the standard library's parser (which resolves no external
entity, and whose expat refuses entity expansion bombs).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ephyra.agent.matching import (
    ParsedTraceback,
    SeenFailure,
    parse_traceback,
    seen_failure,
    split_exception,
)

MAX_REPORT_BYTES = 64 * 1024 * 1024
Outcome = Literal["passed", "failed", "error", "skipped"]


class ReportUnreadable(Exception):
    """The report is missing, too large or not JUnit XML; the message says which."""


@dataclass(frozen=True)
class TestCase:
    """One test of the report. ``failure`` is set for ``failed`` and ``error``."""

    __test__ = False  # not a pytest test class, whatever its name says

    node_id: str
    outcome: Outcome
    failure: SeenFailure | None


@dataclass(frozen=True)
class Report:
    cases: tuple[TestCase, ...]

    @property
    def failures(self) -> tuple[TestCase, ...]:
        """The tests that failed or errored, in the report's order: a test that failed and
        then errored in its teardown is there twice (pytest reports it so), once for each."""
        return tuple(c for c in self.cases if c.outcome in ("failed", "error"))

    def outcome(self, node_id: str) -> Outcome | None:
        """The outcome of a test (its worst, when it is there twice); ``None`` when the
        report does not hold it."""
        found = [c.outcome for c in self.cases if c.node_id == node_id]
        for worst in ("error", "failed", "skipped", "passed"):
            if worst in found:
                return worst  # type: ignore[return-value]
        return None


def report_arguments(path: Path) -> tuple[str, ...]:
    """What a pytest command gets so that ``read_report(path)`` can read its run."""
    return (f"--junitxml={path}", "-o", "junit_family=xunit1", "--tb=native")


def runs_pytest(argv: list[str] | tuple[str, ...]) -> bool:
    """Whether a command runs pytest: one of its words is the program ``pytest`` or
    ``py.test`` (a path to it included), or the module after ``-m``. A command run by a shell
    (``sh -c "… pytest"``) does not count: arguments added at its end would not reach pytest."""
    for index, word in enumerate(argv):
        name = word.rsplit("/", 1)[-1]
        if name in ("pytest", "py.test") or (
            index > 0 and word == "pytest" and argv[index - 1] == "-m"
        ):
            return True
    return False


def read_report(path: Path, worktree: Path) -> Report:
    """The report at ``path`` of a run in ``worktree``; ``ReportUnreadable`` when there is no
    usable one."""
    try:
        size = path.stat().st_size
    except OSError:
        raise ReportUnreadable(f"pytest wrote no report ({path.name})") from None
    if size > MAX_REPORT_BYTES:
        raise ReportUnreadable(
            f"the report is {size:,} bytes; at most {MAX_REPORT_BYTES:,} are read"
        )
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError, ValueError) as exc:
        raise ReportUnreadable(f"the report is not XML: {exc}") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise ReportUnreadable(f"the report is not JUnit XML (its root is <{root.tag[:50]}>)")
    return Report(tuple(_case(element, worktree) for element in root.iter("testcase")))


def _case(element: ET.Element, worktree: Path) -> TestCase:
    node_id = node_id_of(
        element.get("file"), element.get("classname") or "", element.get("name") or "", worktree
    )
    outcome: Outcome = "passed"
    failure = None
    for child in element:
        if child.tag in ("failure", "error"):
            if failure is None:  # one per test case (pytest writes a teardown error apart)
                outcome = "failed" if child.tag == "failure" else "error"
                failure = _failure(child, worktree, node_id)
        elif child.tag == "skipped" and outcome == "passed":
            outcome = "skipped"
    return TestCase(node_id, outcome, failure)


def _failure(element: ET.Element, worktree: Path, node_id: str) -> SeenFailure:
    parsed = parse_traceback(element.text or "")
    if parsed is None or not parsed.exception_type:
        # No native traceback (a collection error, an old pytest): the message attribute.
        exception_type, message = split_exception(element.get("message") or "")
        for line in reversed((element.text or "").splitlines()):
            if line.startswith("E   "):  # pytest's own style: the exception's last line
                found_type, found_message = split_exception(line[4:].strip())
                if found_type:
                    exception_type, message = found_type, found_message
                    break
        parsed = ParsedTraceback(exception_type, message, parsed.frames if parsed else ())
    return seen_failure(parsed, worktree, node_id=node_id)


def node_id_of(file: str | None, classname: str, name: str, worktree: Path) -> str:
    """The pytest node id of a test case, from the ``file``, ``classname`` and ``name`` the
    report gives (pytest wrote ``classname`` as the node id's path with ``/`` made ``.`` and
    ``.py`` dropped, followed by its classes). Without ``file`` (the ``xunit2`` family), the
    longest dotted prefix of ``classname`` that names a ``.py`` file in ``worktree`` is the
    file."""
    if not classname:  # a module that failed to import: its name is its mangled path
        return file or _file_from_classname(name, worktree)[0]
    if file is None:
        file, classes = _file_from_classname(classname, worktree)
    else:
        module = file.removesuffix(".py").replace("/", ".")
        classes = (
            classname[len(module) + 1 :].split(".") if classname.startswith(f"{module}.") else []
        )
    return "::".join([file, *[c for c in classes if c], name])


def _file_from_classname(classname: str, worktree: Path) -> tuple[str, list[str]]:
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        candidate = "/".join(parts[:cut]) + ".py"
        if (worktree / candidate).is_file():
            return candidate, parts[cut:]
    return "/".join(parts) + ".py", []
