"""Benchmark: research, reproduction and locating the culprit on generated repositories.

``.venv/bin/python benchmarks/locate.py [--sizes 100,1000,10000] [--suite-seconds 0.5]``.
For each size N, a shop repository of N first-parent commits (``tests/agent/repos.py``: a
small Python package, a pytest suite with one test that sleeps ``--suite-seconds`` so the
whole suite takes about a second here, a setup script) in which commit N/2 breaks a function;
then, through the local runner, in a quest worktree of its bare mirror:

- **research**: frames mapped, blame, suspects ranked over the last N first-parent commits
  (``walk_back`` = N); the culprit's rank among the suspects is printed;
- **reproduction**: the setup and the whole suite at the head, then the failing test's node id
  alone, twice (a stand-in for ``reproduce``, which matches failures to the signal);
- **known good**: walking back the first-parent history in doubling steps to a passing commit;
- **bisect**: between that commit and the nearest failing one, against the bound
  ⌈log2(n)⌉ + 2 test runs; the setup runs again only where ``requirements.txt`` changed.

Rows: runs (test runs; setups in brackets, "ran/reused"), seconds. The run fails (exit 1) when
bisect misses the injected culprit or exceeds the bound. Timings are wall clock on this
machine, one run each: the test runs dominate them (a pytest start is most of a run).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ephyra.agent import bisect, known_good, prepare, research  # noqa: E402
from ephyra.agent.inputs import run_limits  # noqa: E402
from ephyra.agent.locate import ExitStatusReproduction  # noqa: E402
from ephyra.core.ports import RunRequest  # noqa: E402
from tests.agent.repos import node_reproduction, shop_history, shop_policy, workdir_for  # noqa: E402


@dataclass
class Row:
    commits: int
    step: str
    runs: str
    seconds: float
    note: str


@dataclass
class Report:
    rows: list[Row]
    failures: list[str]

    @property
    def text(self) -> str:
        lines = [
            "# locate: research, reproduction, known good and bisect on generated shops "
            "(local runner)",
            "",
            "| commits | step | runs (setups ran/reused) | seconds | notes |",
            "|--:|---|---|--:|---|",
        ]
        for r in self.rows:
            lines.append(f"| {r.commits:,} | {r.step} | {r.runs} | {r.seconds:.2f} | {r.note} |")
        lines += [f"FAILED: {failure}" for failure in self.failures]
        return "\n".join(lines)


def setups(tested) -> str:
    ran = sum(t.setup == "ran" for t in tested)
    reused = sum(t.setup == "reused" for t in tested)
    return f"({ran}/{reused})"


def measure(
    commits: int, suite_seconds: float, where: Path, echo: bool
) -> tuple[list[Row], list[str]]:
    rows, failures = [], []

    def add(step: str, runs: str, seconds: float, note: str) -> None:
        rows.append(Row(commits, step, runs, seconds, note))
        if echo:
            print(f"  {commits:>6,} {step:<13} {runs:<14} {seconds:8.2f} s  {note}", flush=True)

    start = time.perf_counter()
    shop = shop_history(
        where / "shop", commits=commits, culprit=max(2, commits // 2), suite_seconds=suite_seconds
    )
    workdir = workdir_for(shop, where)
    add("generate", "-", time.perf_counter() - start, "fast-import, bare mirror, worktree")
    work = shop_policy(walk_back=min(commits, 100_000))
    signal = shop.signal()

    start = time.perf_counter()
    found = research(workdir, signal, head=shop.head, known_good=None, earlier=[], work=work)
    ranks = [s.rank for s in found.suspects if s.commit.sha == shop.culprit]
    add(
        "research",
        "0",
        time.perf_counter() - start,
        f"{found.considered} commits touched the frames' files; culprit ranked "
        f"{ranks[0] if ranks else 'not'}",
    )

    start = time.perf_counter()
    prepared = prepare(workdir, work, shop.head, name="reproduce")
    assert work.test is not None
    suite = workdir.runner.run(
        RunRequest(
            argv=tuple(work.test),
            cwd=str(workdir.worktree),
            artifacts_dir=str(workdir.artifacts),
            name="reproduce-suite",
            limits=run_limits(work, "test"),
        ),
        should_stop=workdir.should_stop,
    )
    node = node_reproduction(shop)
    twice = [ExitStatusReproduction(node.argv, name=f"reproduce-{n}").run(workdir) for n in (1, 2)]
    add(
        "reproduction",
        f"3 ({int(prepared.setup == 'ran')}/0)",
        time.perf_counter() - start,
        f"suite {suite.duration_seconds:.2f} s (exit {suite.exit_code}); node id fails twice: "
        f"{twice == [False, False]}",
    )
    if twice != [False, False]:
        failures.append(f"{commits}: the failing test did not fail twice at the head")

    start = time.perf_counter()
    good = known_good(workdir, work, node, head=shop.head, deployed_before=None)
    add(
        "known good",
        f"{good.test_runs} {setups(good.tested)}",
        time.perf_counter() - start,
        f"passes {good.distance} first-parent commits back",
    )
    if good.commit is None:
        failures.append(f"{commits}: no good commit found")
        return rows, failures

    start = time.perf_counter()
    location = bisect(workdir, work, node, good=good.commit, bad=good.bad, signal=signal)
    hit = location.culprit is not None and location.culprit.sha == shop.culprit
    add(
        "bisect",
        f"{location.test_runs} {setups(location.tested)}",
        time.perf_counter() - start,
        f"{location.commits} commits, bound {location.bound}; culprit found: {hit}",
    )
    if not hit:
        failures.append(f"{commits}: bisect found {location.culprit} instead of {shop.culprit}")
    if location.test_runs > location.bound:
        failures.append(f"{commits}: {location.test_runs} test runs > bound {location.bound}")
    return rows, failures


def run(sizes: list[int], suite_seconds: float, *, echo: bool = True) -> Report:
    report = Report([], [])
    with tempfile.TemporaryDirectory(prefix="ephyra-locate-bench-") as tmp:
        for size in sizes:
            rows, failures = measure(size, suite_seconds, Path(tmp) / str(size), echo)
            report.rows += rows
            report.failures += failures
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument(
        "--suite-seconds", type=float, default=0.5, help="how long the suite's slow test sleeps"
    )
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    report = run(sizes, args.suite_seconds)
    print(report.text)
    return 1 if report.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
