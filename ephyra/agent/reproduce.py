"""Reproduce the signal's failure at the head: the step between the hypothesis and the plan.

``reproduce(workdir, work, signal, head=…)`` prepares the head (``prepare``: checkout and
setup), runs the policy's ``test`` command, and looks for a failure that matches the signal
(``matching``). When the command runs pytest, each failing test is read from pytest's JUnit
report (``junit``); another command counts by its exit status and the Python traceback (or the
``Type: message`` line) in its output. A match is then narrowed and confirmed:

1. the narrow command: the test command without its path arguments, followed by the node ids
   of the matching tests (at most ``MAX_NODE_IDS``);
2. it must fail the same way **twice in a row**; when it passes on its own, the whole suite
   runs again, and if the tests fail the same way there, the suite is the reproduction (the
   failure needs the tests before it); when neither fails again, the failure is flaky and
   that is what the step reports.

When the suite does not reproduce and the policy has a ``probe``, the probe runs: a failing
exit status whose output matches the signal, twice in a row. Otherwise ``NotReproduced`` says
what was run and what was seen, each failing test with the reason it does not match.

The ``Reproduction`` is run again later, at other commits, by bisect and by the proof:
``run(workdir)`` is ``True`` when it passes, ``False`` when it fails the way it did at the
head, ``None`` when it could not say (it did not run, timed out, or failed another way).
``Reproduction.from_evidence`` rebuilds it from ``to_evidence()`` in another job.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ephyra.agent.inputs import (
    SignalFacts,
    Stopped,
    Workdir,
    run_evidence,
    run_limits,
    stop_if_asked,
)
from ephyra.agent.junit import (
    Report,
    ReportUnreadable,
    read_report,
    report_arguments,
    runs_pytest,
)
from ephyra.agent.matching import SeenFailure, Target, compare, output_failure
from ephyra.agent.prepare import prepare
from ephyra.core.ports import RunLimits, RunRequest, RunResult
from ephyra.policy.work import WorkPolicy
from ephyra.redaction.redact import redact

MAX_NODE_IDS = 10  # the narrow command names at most this many matching tests
MAX_SEEN = 10  # failures described when nothing matches
MAX_OUTPUT_READ = 8 * 1024 * 1024  # of a run's output file, when its traceback is looked for
# Where a pytest run writes its report: inside the worktree, the one place a sandboxed run
# may write; moved to the artifacts right after the run.
REPORTS_DIR = ".ephyra-reports"
SUMMARY_LIMIT = 4000

Kind = Literal["pytest", "command", "probe"]


@dataclass(frozen=True)
class Reproduction:
    """A command that fails the way production did. ``kind``: ``pytest`` (the test command
    narrowed to ``node_ids``), ``command`` (a test command that is not pytest), ``probe``.
    ``failure`` is the failure as seen at ``head``; ``runs`` are the two runs that confirmed
    it (as ``run_evidence``), after any setup."""

    kind: Kind
    argv: tuple[str, ...]
    node_ids: tuple[str, ...]
    failure: SeenFailure
    head: str
    limits: RunLimits
    runs: tuple[dict[str, Any], ...] = ()
    matched: int = 0  # how many failing tests matched the signal (node_ids keeps a few)
    note: str = ""
    setup: dict[str, Any] = field(default_factory=dict)

    @property
    def command(self) -> str:
        """The command as one line a person can paste into a shell."""
        return shlex.join(self.argv)

    def run(self, workdir: Workdir, *, name: str = "reproduction") -> bool | None:
        """Run the reproduction on what the worktree holds now (no checkout, no setup)."""
        attempt = _execute(workdir, self.argv, name=name, limits=self.limits, pytest=self._pytest)
        return _judge(attempt, Target.from_failure(self.failure), self.node_ids, workdir.worktree)

    @property
    def _pytest(self) -> bool:
        return self.kind == "pytest"

    def summary(self) -> str:
        seen = self.failure.describe()
        if self.kind == "pytest":
            tests = ", ".join(self.node_ids[:3])
            more = f" and {len(self.node_ids) - 3} more" if len(self.node_ids) > 3 else ""
            what = f"{_plural(len(self.node_ids), 'test')} ({tests}{more})"
        else:
            what = "the probe" if self.kind == "probe" else "the test command"
        text = (
            f"Reproduced at {self.head[:12]}: {what} failed twice in a row the way the signal "
            f"did: {seen}.\nCommand: {self.command}"
        )
        if self.matched > len(self.node_ids):
            first = len(self.node_ids)
            text += f"\n{self.matched} failing tests matched; the command names the first {first}."
        if self.note:
            text += f"\n{self.note}"
        return redact(text)[:SUMMARY_LIMIT]

    def to_evidence(self) -> dict[str, Any]:
        return {
            "reproduced": True,
            "kind": self.kind,
            "command": redact(self.command)[:2000],
            "argv": [redact(word)[:500] for word in self.argv[:100]],
            "node_ids": [n[:500] for n in self.node_ids],
            "matched": self.matched,
            "failure": self.failure.to_evidence(),
            "head": self.head,
            "limits": self.limits.to_dict(),
            "runs": list(self.runs),
            "note": self.note,
            "setup": self.setup,
        }

    @classmethod
    def from_evidence(cls, evidence: dict[str, Any]) -> Reproduction:
        """The reproduction ``to_evidence()`` described (for bisect and proof, in a later
        job). A ``KeyError`` or ``ValueError`` when the evidence is not one."""
        if not evidence.get("reproduced"):
            raise ValueError("this evidence records no reproduction")
        kind = evidence["kind"]
        if kind not in ("pytest", "command", "probe"):
            raise ValueError(f"unknown reproduction kind {kind!r}")
        return cls(
            kind=kind,
            argv=tuple(evidence["argv"]),
            node_ids=tuple(evidence.get("node_ids", ())),
            failure=SeenFailure.from_evidence(evidence["failure"]),
            head=str(evidence["head"]),
            limits=RunLimits.from_dict(evidence["limits"]),
            runs=tuple(evidence.get("runs", ())),
            matched=int(evidence.get("matched", 0)),
            note=str(evidence.get("note", "")),
            setup=dict(evidence.get("setup", {})),
        )


@dataclass(frozen=True)
class NotReproduced:
    """Why the failure was not reproduced. ``code``: ``no_command`` (the policy has neither
    a test nor a probe), ``setup_failed``, ``flaky`` (a matching failure that did not fail
    again), ``not_matched`` (runs failed, or passed, but not the way the signal did).
    ``tried`` says, line by line, what was run and what was seen; ``seen`` holds the failures
    that did not match, ``runs`` every run of the step."""

    code: Literal["no_command", "setup_failed", "flaky", "not_matched"]
    head: str
    tried: tuple[str, ...]
    seen: tuple[dict[str, Any], ...] = ()
    runs: tuple[dict[str, Any], ...] = ()
    setup: dict[str, Any] = field(default_factory=dict)

    @property
    def flaky(self) -> bool:
        return self.code == "flaky"

    def summary(self) -> str:
        at = self.head[:12]
        opening = {
            "no_command": "Nothing to reproduce with: the policy's work section has no test "
            "and no probe.",
            "setup_failed": f"Not reproduced: the setup failed at {at}.",
            "flaky": f"Not reproduced: the failure at {at} is flaky (it did not fail twice in "
            "a row the same way).",
            "not_matched": f"Not reproduced at {at}: no run failed the way the signal did.",
        }[self.code]
        lines = [opening, *(f"- {line}" for line in self.tried)]
        return _bounded("\n".join(redact(line) for line in lines))

    def to_evidence(self) -> dict[str, Any]:
        return {
            "reproduced": False,
            "code": self.code,
            "head": self.head,
            "tried": [redact(line)[:1000] for line in self.tried[:20]],
            "seen": list(self.seen[:MAX_SEEN]),
            "runs": list(self.runs),
            "setup": self.setup,
        }


def reproduce(
    workdir: Workdir, work: WorkPolicy, signal: SignalFacts, *, head: str
) -> Reproduction | NotReproduced:
    """Reproduce ``signal``'s failure at ``head``; see the module's docstring."""
    if work.test is None and work.probe is None:
        return NotReproduced("no_command", head, ("the policy has no test command and no probe",))
    names = _Names()
    prepared = prepare(workdir, work, head, name=names.next("prepare"))
    head = prepared.commit
    setup = prepared.to_evidence()
    if not prepared.ok:
        return NotReproduced(
            "setup_failed", head, (prepared.summary(),), runs=prepared.runs, setup=setup
        )
    target = Target.from_signal(signal)
    step = _Step(workdir, work, target, head, names, list(prepared.runs), setup)
    if work.test is not None:
        found = step.try_suite(tuple(work.test))
        if found is not None:
            return found
    if work.probe is not None:
        found = step.try_probe(tuple(work.probe))
        if found is not None:
            return found
    return NotReproduced(
        "flaky" if step.flaky else "not_matched",
        head,
        tuple(step.tried),
        tuple(step.seen),
        tuple(step.runs),
        setup,
    )


@dataclass
class _Attempt:
    """One run and what it showed: the failing tests of its report (pytest), or the failure
    its output shows (another command)."""

    name: str
    shown: tuple[str, ...]  # the command as the policy wrote it, without the report's options
    result: RunResult
    pytest: bool
    report: Report | None
    report_problem: str
    output: SeenFailure | None

    def evidence(self) -> dict[str, Any]:
        return run_evidence(self.name, self.result)


class _Names:
    """Artifacts names unique within the step: ``reproduce-01-prepare``, ``reproduce-02-suite``…"""

    def __init__(self) -> None:
        self.count = 0

    def next(self, what: str) -> str:
        self.count += 1
        return f"reproduce-{self.count:02d}-{what}"


class _Step:
    def __init__(
        self,
        workdir: Workdir,
        work: WorkPolicy,
        target: Target,
        head: str,
        names: _Names,
        runs: list[dict[str, Any]],
        setup: dict[str, Any],
    ) -> None:
        self.workdir = workdir
        self.work = work
        self.target = target
        self.head = head
        self.names = names
        self.runs = runs
        self.setup = setup
        self.tried: list[str] = []
        self.seen: list[dict[str, Any]] = []
        self.flaky = False

    def execute(self, argv: tuple[str, ...], what: str, kind: str, *, pytest: bool) -> _Attempt:
        limits = run_limits(self.work, "probe" if kind == "probe" else "test")
        attempt = _execute(
            self.workdir, argv, name=self.names.next(what), limits=limits, pytest=pytest
        )
        self.runs.append(attempt.evidence())
        return attempt

    def try_suite(self, test: tuple[str, ...]) -> Reproduction | None:
        pytest = runs_pytest(test)
        first = self.execute(test, "suite", "test", pytest=pytest)
        if not pytest or first.report is None:
            return self._confirm_by_output(test, first, "command", "the test command")
        matched = [
            c
            for c in first.report.failures
            if c.failure and compare(c.failure, self.target).matches
        ]
        if not matched:
            self._record_no_match(first, "the test command")
            return None
        node_ids = tuple(dict.fromkeys(c.node_id for c in matched))[:MAX_NODE_IDS]
        failure = next(c.failure for c in matched if c.failure is not None)
        narrow = narrow_argv(test, node_ids, self.workdir.worktree)
        again = self.execute(narrow, "confirm", "test", pytest=True)
        if _judge(again, self.target, node_ids, self.workdir.worktree) is False:
            third = self.execute(narrow, "confirm", "test", pytest=True)
            if _judge(third, self.target, node_ids, self.workdir.worktree) is False:
                return self._found(
                    "pytest", narrow, node_ids, failure, [again, third], len(matched)
                )
            return self._record_flaky(
                node_ids, failure, "failed in the suite and on its own, then passed"
            )
        # On their own the tests did not fail: perhaps they need the tests before them.
        suite = self.execute(test, "suite", "test", pytest=True)
        if _judge(suite, self.target, node_ids, self.workdir.worktree) is False:
            note = (
                f"On their own ({shlex.join(narrow)}) the tests "
                f"{_describe_outcome(again, node_ids)}; they fail this way only with the rest "
                "of the suite, so the reproduction is the whole suite."
            )
            return self._found(
                "pytest", test, node_ids, failure, [first, suite], len(matched), note
            )
        return self._record_flaky(
            node_ids, failure, "failed once, then passed on their own and in the suite"
        )

    def try_probe(self, probe: tuple[str, ...]) -> Reproduction | None:
        first = self.execute(probe, "probe", "probe", pytest=False)
        return self._confirm_by_output(probe, first, "probe", "the probe")

    def _confirm_by_output(
        self, argv: tuple[str, ...], first: _Attempt, kind: Kind, label: str
    ) -> Reproduction | None:
        if first.report_problem:
            self.tried.append(
                f"{label}: {first.report_problem}; judged by its exit status and output"
            )
        verdict = _judge(first, self.target, (), self.workdir.worktree)
        failure = first.output
        if verdict is not False or failure is None:
            self._record_no_match(first, label)
            return None
        second = self.execute(argv, "probe" if kind == "probe" else "suite", kind, pytest=False)
        if _judge(second, self.target, (), self.workdir.worktree) is False:
            return self._found(kind, argv, (), failure, [first, second], 1)
        self.flaky = True
        self.tried.append(
            f"{label} ({shlex.join(argv)}) failed the way the signal did, then "
            f"{_ended(second.result)}: flaky"
        )
        self.seen.append(failure.to_evidence())
        return None

    def _found(
        self,
        kind: Kind,
        argv: tuple[str, ...],
        node_ids: tuple[str, ...],
        failure: SeenFailure,
        confirming: list[_Attempt],
        matched: int,
        note: str = "",
    ) -> Reproduction:
        if self.flaky:
            note = " ".join(
                filter(
                    None,
                    [note, "The test suite's matching failure was flaky; the probe reproduces."],
                )
            )
        return Reproduction(
            kind=kind,
            argv=argv,
            node_ids=node_ids,
            failure=failure,
            head=self.head,
            limits=run_limits(self.work, "probe" if kind == "probe" else "test"),
            runs=tuple(a.evidence() for a in confirming),
            matched=matched,
            note=note,
            setup=self.setup,
        )

    def _record_flaky(self, node_ids: tuple[str, ...], failure: SeenFailure, how: str) -> None:
        self.flaky = True
        self.tried.append(f"{', '.join(node_ids[:3])} matched the signal but {how}: flaky")
        self.seen.append(failure.to_evidence())
        return None

    def _record_no_match(self, attempt: _Attempt, label: str) -> None:
        result = attempt.result
        line = f"{label} ({shlex.join(attempt.shown[:30])}) {_ended(result)}"
        cases = attempt.report.failures if attempt.report is not None else ()
        if attempt.report is not None:
            line += (
                f"; {_plural(len(cases), 'test')} failed, none the way the signal did "
                f"(the signal: {self.target.describe()})"
            )
        elif attempt.output is not None:
            why = compare(attempt.output, self.target).why or "it exited 0"
            line += f"; its output shows {attempt.output.describe()}: {why}"
            self.seen.append({**attempt.output.to_evidence(), "why_not": why[:500]})
        elif not result.timed_out and result.exit_code != 0:
            line += "; its output shows no exception"
        self.tried.append(line)
        for case in cases[:MAX_SEEN]:
            if case.failure is not None:
                why = compare(case.failure, self.target).why
                self.seen.append({**case.failure.to_evidence(), "why_not": why[:500]})
                self.tried.append(f"{case.node_id}: {case.failure.describe()}: {why}")


def _execute(
    workdir: Workdir, argv: tuple[str, ...], *, name: str, limits: RunLimits, pytest: bool
) -> _Attempt:
    """Run ``argv`` in the worktree; for pytest, with a JUnit report moved to the artifacts."""
    stop_if_asked(workdir)
    shown = argv
    reports = workdir.worktree / REPORTS_DIR
    inside = reports / f"{name}.xml"
    if pytest:
        _remove(reports)  # never write through a link an earlier run may have left there
        reports.mkdir()
        argv = (*argv, *report_arguments(inside))
    try:
        result = workdir.runner.run(
            RunRequest(
                argv=argv,
                cwd=str(workdir.worktree),
                artifacts_dir=str(workdir.artifacts),
                name=name,
                env=dict(workdir.env),
                limits=limits,
            ),
            should_stop=workdir.should_stop,
        )
        if result.stopped:
            raise Stopped(f"asked to stop during {name}")
        report, problem = None, ""
        if pytest and (inside.is_symlink() or reports.is_symlink()):
            problem = "the run left a symbolic link where pytest's report goes; it is not read"
        elif pytest:
            try:
                report = read_report(inside, workdir.worktree)
            except ReportUnreadable as exc:
                problem = str(exc)
            else:
                # Beside the run's log, under the name the runner gave it (a caller's
                # runner may prefix the names of a reproduction's runs).
                shutil.copyfile(inside, Path(result.output_path).with_suffix(".xml"))
    finally:
        if pytest:
            _remove(reports)
    output = None
    if report is None:
        output = output_failure(_read_output(result), workdir.worktree, "")
    return _Attempt(name, shown, result, pytest, report, problem, output)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def _read_output(result: RunResult) -> str:
    try:
        with open(result.output_path, "rb") as file:
            return file.read(MAX_OUTPUT_READ).decode("utf-8", errors="replace")
    except OSError:
        return result.output_excerpt


def _judge(
    attempt: _Attempt, target: Target, node_ids: tuple[str, ...], worktree: Path
) -> bool | None:
    """``True``: passed (the tests named passed; without a report, exit 0). ``False``:
    failed the way ``target`` says (every test named failed so). ``None``: neither."""
    result = attempt.result
    if result.timed_out or result.signal is not None:
        return None
    if attempt.report is not None and node_ids:
        outcomes = {n: attempt.report.outcome(n) for n in node_ids}
        if all(o == "passed" for o in outcomes.values()):
            return True
        matching = {
            c.node_id
            for c in attempt.report.failures
            if c.failure is not None and compare(c.failure, target).matches
        }
        if matching.issuperset(node_ids):
            return False
        return None
    if result.exit_code == 0:
        return True
    if result.exit_code in (126, 127):  # could not start: not a verdict on the code
        return None
    if attempt.report is None:
        failure = attempt.output
        if failure is None and target.exception_type:
            failure = output_failure(_read_output(result), worktree, target.exception_type)
            attempt.output = failure
        if failure is not None and compare(failure, target).matches:
            return False
    return None


# Options of pytest (and its common plugins) that take the next word as their value: a word
# after one of them is never taken for a path to drop.
_VALUE_OPTIONS = frozenset(
    {
        "-c", "-p", "-k", "-m", "-o", "-W", "-r", "--rootdir", "--confcutdir", "--basetemp",
        "--junitxml", "--junit-xml", "--junitprefix", "--junit-prefix", "--log-file",
        "--ignore", "--ignore-glob", "--deselect", "--tb", "--maxfail", "--durations",
        "--override-ini", "--config-file", "--import-mode", "--cov", "--cov-config",
        "--cov-report", "-n", "--numprocesses", "--dist", "--timeout", "--reruns",
    }
)  # fmt: skip


def narrow_argv(
    test: tuple[str, ...], node_ids: tuple[str, ...], worktree: Path
) -> tuple[str, ...]:
    """The test command without its path arguments (words after ``pytest`` that are node ids
    or name a file or directory of the worktree), followed by ``node_ids``."""
    start = next((i for i, word in enumerate(test) if runs_pytest(test[: i + 1])), len(test) - 1)
    kept = list(test[: start + 1])
    for index in range(start + 1, len(test)):
        word, before = test[index], test[index - 1]
        names_path = not word.startswith("-") and ("::" in word or (worktree / word).exists())
        if names_path and before not in _VALUE_OPTIONS:
            continue
        kept.append(word)
    return (*kept, *node_ids)


def _ended(result: RunResult) -> str:
    if result.timed_out:
        return f"was killed at its limit of {result.limits.wall_seconds:g} s"
    if result.signal is not None:
        return f"was killed by {result.signal}"
    if result.exit_code == 0:
        return "passed (exit 0)"
    return f"exited {result.exit_code}"


def _describe_outcome(attempt: _Attempt, node_ids: tuple[str, ...]) -> str:
    if attempt.report is None:
        return _ended(attempt.result)
    outcomes = sorted({str(attempt.report.outcome(n) or "not run") for n in node_ids})
    return " / ".join(outcomes)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _bounded(text: str) -> str:
    if len(text) <= SUMMARY_LIMIT:
        return text
    return text[: SUMMARY_LIMIT - 1] + "…"
