"""The checks of a proof, run in the quest revision's worktree at the recorded head.

- ``tests``: the policy's ``test`` command. It passes when the suite passes; when it fails and
  the command runs pytest, the suite runs at the base too, and the check passes when every test
  that fails at the head already failed at the base (both lists are kept). A test the base does
  not have, failing at the head, fails the check.
- ``probe``: the quest's own reproduction must now pass, and so must every regression probe an
  earlier quest of the workspace left (``work.probes``).
- ``lint``: the policy's ``lint`` command; any other name: that command of ``work.checks``.

A check that fails runs once more (the whole check, base comparison included): failed, then
passed is ``flaky``, which counts as failed unless the policy's ``proof.allow_flaky`` says
otherwise. Every command goes through the runner the policy names; each run leaves its log and
record in the proof's artifacts folder under a name of its own.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ephyra.agent.inputs import Stopped, Workdir, run_limits, stop_if_asked
from ephyra.agent.junit import ReportUnreadable, read_report, report_arguments, runs_pytest
from ephyra.agent.prepare import prepare
from ephyra.agent.reproduce import Reproduction
from ephyra.core.ports import RunLimits, RunRequest, RunResult
from ephyra.policy import AutonomyPolicy

# Where pytest writes its report: inside the worktree, the one place a sandboxed run may write.
REPORTS_DIR = ".ephyra-reports"
MAX_LISTED = 200  # node ids kept in a bundle's lists


@dataclass
class Attempt:
    """One run of a check: did it pass, the runs it made (the last one's output is the
    check's), and what it found."""

    passed: bool
    runs: list[tuple[str, RunResult]] = field(default_factory=list)
    note: str = ""
    base_failures: tuple[str, ...] = ()
    head_failures: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()


@dataclass
class CheckOutcome:
    name: str
    command: str
    result: str  # passed, failed or flaky
    passed: bool  # whether it counts as passed (a flaky check does only when allowed)
    attempts: list[Attempt]

    @property
    def last(self) -> Attempt:
        return self.attempts[-1]

    @property
    def runs(self) -> list[tuple[str, RunResult]]:
        return [run for attempt in self.attempts for run in attempt.runs]


@dataclass(frozen=True)
class Probe:
    """A reproduction to run: the quest's own (``own``) or a probe an earlier quest left."""

    label: str
    reproduction: Reproduction | None  # None: it cannot be rebuilt (``problem`` says why)
    problem: str = ""


class Checks:
    """Runs the named checks for one proof: ``run(name)`` per check."""

    def __init__(
        self,
        workdir: Workdir,
        policy: AutonomyPolicy,
        *,
        head: str,
        base: str,
        probes: Callable[[], list[Probe]],
    ) -> None:
        self.workdir = workdir
        self.policy = policy
        self.work = policy.work
        self.head = head
        self.base = base
        self.probes = probes

    # --- one check, with its second try ----------------------------------------------------

    def run(self, name: str) -> CheckOutcome:
        command, attempt_once = self._check(name)
        first = attempt_once(1)
        if first.passed:
            return CheckOutcome(name, command, "passed", True, [first])
        second = attempt_once(2)
        if not second.passed:
            return CheckOutcome(name, command, "failed", False, [first, second])
        allowed = self.policy.proof.allow_flaky
        second.note = (
            f"failed, then passed when run again: flaky ({'allowed' if allowed else 'not allowed'}"
            " by proof.allow_flaky)"
        )
        return CheckOutcome(name, command, "flaky", allowed, [first, second])

    def _check(self, name: str) -> tuple[str, Callable[[int], Attempt]]:
        if name == "tests":
            if self.work.test is None:
                return "", lambda n: Attempt(False, note="the policy has no work.test command")
            return shlex.join(self.work.test), self._tests
        if name == "probe":
            return "the reproduction and the workspace's regression probes", self._probe
        if name == "lint":
            if self.work.lint is None:
                return "", lambda n: Attempt(False, note="the policy has no work.lint command")
            argv = tuple(self.work.lint)
            return shlex.join(argv), lambda n: self._command(
                argv, f"lint-{n}", run_limits(self.work, "lint")
            )
        argv_list = self.work.checks.get(name)
        if argv_list is None:
            return "", lambda n: Attempt(False, note=f"the policy has no work.checks.{name}")
        argv = tuple(argv_list)
        return shlex.join(argv), lambda n: self._command(
            argv, f"check-{name}-{n}", run_limits(self.work, "test")
        )

    # --- the kinds of check ----------------------------------------------------------------

    def _command(self, argv: tuple[str, ...], name: str, limits: RunLimits) -> Attempt:
        result = self._execute(argv, name, limits)
        return Attempt(result.ok, [(name, result)], note=_ended(result))

    def _tests(self, n: int) -> Attempt:
        argv = tuple(self.work.test or ())
        limits = run_limits(self.work, "test")
        pytest = runs_pytest(argv)
        at_head, report = self._suite(argv, f"tests-head-{n}", limits, pytest)
        head_run = (f"tests-head-{n}", at_head)
        attempt = Attempt(at_head.ok, [head_run], note=_ended(at_head))
        if at_head.ok or not pytest:
            return attempt
        if report is None or not report.failures:
            attempt.note = f"{_ended(at_head)}; no failing test was reported, so it fails"
            return attempt
        failing_head = _failing(report)
        # Would the base have failed the same tests? Run it there, then come back to the head.
        stop_if_asked(self.workdir)
        ready = prepare(self.workdir, self.work, self.base, name=f"tests-base-{n}-prepare")
        try:
            if not ready.ok:
                attempt.note = f"the base could not be set up to compare: {ready.reason}"
                attempt.head_failures = failing_head
                return attempt
            at_base, base_report = self._suite(argv, f"tests-base-{n}", limits, pytest)
        finally:
            back = prepare(self.workdir, self.work, self.head, name=f"tests-head-{n}-prepare")
        if not back.ok:
            attempt.note = f"the head could not be set up again: {back.reason}"
            return attempt
        # The head's run stays last: its output is the check's, not the base's.
        attempt.runs = [(f"tests-base-{n}", at_base), head_run]
        failing_base = () if base_report is None else _failing(base_report)
        new = [test for test in failing_head if test not in failing_base]
        attempt.head_failures = failing_head[:MAX_LISTED]
        attempt.base_failures = failing_base[:MAX_LISTED]
        if new:
            attempt.note = (
                f"{len(new)} tests fail at the head that did not fail at the base: "
                + ", ".join(new[:5])
            )[:2000]
            return attempt
        attempt.passed = True
        attempt.note = (
            f"the {len(failing_head)} tests failing at the head already failed at the base"
        )
        return attempt

    def _probe(self, n: int) -> Attempt:
        runs: list[tuple[str, RunResult]] = []
        lines, failed = [], []
        probes = self.probes()
        if not probes:
            return Attempt(False, note="no reproduction is recorded for this quest")
        for index, probe in enumerate(probes, 1):
            if probe.reproduction is None:
                lines.append(f"{probe.label}: failed ({probe.problem})"[:600])
                failed.append(probe.label)
                continue
            name = f"probe-{n}-{index}"
            recorder = _Recording(self.workdir.runner, runs, name)
            seen = probe.reproduction.run(_with_runner(self.workdir, recorder), name=name)
            verdict = {True: "passed", False: "failed the same way"}.get(seen, "failed")
            lines.append(f"{probe.label}: {verdict}"[:600])
            if seen is not True:
                failed.append(probe.label)
        note = (
            f"{len(failed)} of {len(probes)} failed: {', '.join(failed[:5])}"
            if failed
            else f"all {len(probes)} passed"
        )
        return Attempt(not failed, runs, note=note[:2000], probes=tuple(lines[:MAX_LISTED]))

    # --- running ---------------------------------------------------------------------------

    def _suite(self, argv, name, limits, pytest):
        reports = self.workdir.worktree / REPORTS_DIR
        inside = reports / f"{name}.xml"
        report = None
        if pytest:
            _clear(reports)
            reports.mkdir()
            argv = (*argv, *report_arguments(inside))
        try:
            result = self._execute(argv, name, limits)
            if pytest and not (inside.is_symlink() or reports.is_symlink()):
                try:
                    report = read_report(inside, self.workdir.worktree)
                except ReportUnreadable:
                    report = None
                else:
                    Path(result.output_path).with_suffix(".xml").write_bytes(inside.read_bytes())
        finally:
            if pytest:
                _clear(reports)
        return result, report

    def _execute(self, argv: tuple[str, ...], name: str, limits: RunLimits) -> RunResult:
        stop_if_asked(self.workdir)
        result = self.workdir.runner.run(
            RunRequest(
                argv=argv,
                cwd=str(self.workdir.worktree),
                artifacts_dir=str(self.workdir.artifacts),
                name=name,
                env=dict(self.workdir.env),
                limits=limits,
            ),
            should_stop=self.workdir.should_stop,
        )
        if result.stopped:
            raise Stopped(f"asked to stop during {name}")
        return result


class _Recording:
    """A runner that passes each run on and keeps it, under ``<name>`` (then ``<name>-2``…),
    so the runs of a reproduction (which names its own) are the check's and stay apart."""

    def __init__(self, runner, runs: list[tuple[str, RunResult]], name: str) -> None:
        self.runner = runner
        self.runs = runs
        self.name = name
        self.count = 0

    def run(self, request: RunRequest, should_stop=None) -> RunResult:
        self.count += 1
        name = self.name if self.count == 1 else f"{self.name}-{self.count}"
        result = self.runner.run(replace(request, name=name), should_stop=should_stop)
        self.runs.append((name, result))
        return result


def _with_runner(workdir: Workdir, runner) -> Workdir:
    return Workdir(
        worktree=workdir.worktree,
        artifacts=workdir.artifacts,
        runner=runner,
        env=workdir.env,
        should_stop=workdir.should_stop,
    )


def _failing(report) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for case in report.failures:
        seen.setdefault(case.node_id[:500], None)
    return tuple(seen)


def _clear(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def _ended(result: RunResult) -> str:
    return result.describe()
