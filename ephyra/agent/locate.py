"""Locating the culprit: the last good commit, then a first-parent bisection to the first bad.

``known_good`` finds where the reproduction passes: the deployment before the signal's first
sighting, else the policy's ``known_good`` ref, else walking back the head's first-parent
history in doubling steps (1, 2, 4… commits back, up to ``walk_back``). ``bisect`` then halves
the first-parent commits between that good commit and a bad one, running the reproduction at
each (after ``prepare``: the setup runs only where its files changed), until one commit is
left: the culprit. Only first parents are visited, so a change that came in through a merge
is found as that merge (reverted with ``-m 1``). A commit whose setup fails, or where the
reproduction cannot run, is skipped as ``git bisect skip`` does: the nearest untested commit
is tried instead, and if only skipped commits are left the culprit is one of them.

The worktree is back where it was (on its branch) when either returns, even when it raises.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ephyra.agent.frames import (
    changed_lines,
    file_lines,
    frame_lines,
    map_frames,
    overlaps,
    repository_files,
)
from ephyra.agent.gitcli import (
    Commit,
    commits,
    first_parents,
    git,
    head_ref,
    is_ancestor,
    is_shallow,
    resolve,
)
from ephyra.agent.inputs import (
    ReproductionLike,
    SignalFacts,
    Stopped,
    Workdir,
    run_evidence,
    stop_if_asked,
)
from ephyra.agent.prepare import prepare
from ephyra.core.ports import RunLimits, Runner, RunRequest, RunResult
from ephyra.policy.work import WorkPolicy

Verdict = Literal["good", "bad", "skip"]


class LocateError(ValueError):
    """The commits given cannot be bisected (unknown, or not one before the other)."""


@dataclass(frozen=True)
class ExitStatusReproduction:
    """The plainest reproduction: a command whose exit status says it all. Exit 0 passes,
    an exit in ``fails`` (1: pytest's "tests failed") fails, anything else (a missing test,
    a usage error, a timeout) could not tell. It runs under the name ``name``."""

    argv: tuple[str, ...]
    limits: RunLimits = field(default_factory=RunLimits)
    fails: tuple[int, ...] = (1,)
    name: str = "reproduce"

    def run(self, workdir: Workdir) -> bool | None:
        result = workdir.runner.run(
            RunRequest(
                argv=self.argv,
                cwd=str(workdir.worktree),
                artifacts_dir=str(workdir.artifacts),
                name=self.name,
                env=dict(workdir.env),
                limits=self.limits,
            ),
            should_stop=workdir.should_stop,
        )
        if result.stopped:
            raise Stopped(f"asked to stop during {self.name}")
        if result.ok:
            return True
        if result.exit_code in self.fails and not result.timed_out:
            return False
        return None


@dataclass(frozen=True)
class Tested:
    """One commit tried: its verdict, why when skipped, its setup, and its runs."""

    commit: str
    verdict: Verdict
    reason: str
    setup: str
    test_run: bool  # the reproduction ran (a failed setup is no test run)
    runs: tuple[dict[str, Any], ...]

    def to_evidence(self) -> dict[str, Any]:
        data = {
            "commit": self.commit,
            "result": self.verdict,
            "setup": self.setup,
            "runs": list(self.runs),
        }
        if self.reason:
            data["reason"] = self.reason
        return data


class _Named:
    """A runner that puts a prefix before each run's name (so a reproduction may reuse its
    own names at every commit without overwriting the artifacts of another) and keeps each
    result."""

    def __init__(self, runner: Runner, prefix: str) -> None:
        self.runner = runner
        self.prefix = prefix
        self.name = runner.name
        self.results: list[tuple[str, RunResult]] = []

    def run(
        self, request: RunRequest, *, should_stop: Callable[[], bool] | None = None
    ) -> RunResult:
        named = dataclasses.replace(request, name=f"{self.prefix}-{request.name}"[:128])
        result = self.runner.run(named, should_stop=should_stop)
        self.results.append((named.name, result))
        return result


def try_commit(
    workdir: Workdir, work: WorkPolicy, reproduction: ReproductionLike, sha: str, prefix: str
) -> Tested:
    """Prepare ``sha`` and run the reproduction there; every run named ``<prefix>-…``."""
    prepared = prepare(workdir, work, sha, name=prefix)
    if not prepared.ok:
        return Tested(
            sha,
            "skip",
            f"the setup failed: {prepared.reason}"[:1000],
            prepared.setup,
            False,
            prepared.runs,
        )
    runner = _Named(workdir.runner, prefix)
    outcome = reproduction.run(dataclasses.replace(workdir, runner=runner))
    runs = prepared.runs + tuple(run_evidence(name, result) for name, result in runner.results)
    if any(result.stopped for _, result in runner.results):
        raise Stopped(f"asked to stop at {sha[:12]}")
    stop_if_asked(workdir)
    if outcome is None:
        said = runner.results[-1][1].describe() if runner.results else "it ran nothing"
        return Tested(
            sha, "skip", f"the reproduction could not run ({said})", prepared.setup, True, runs
        )
    return Tested(sha, "good" if outcome else "bad", "", prepared.setup, True, runs)


@contextlib.contextmanager
def on_commits(workdir: Workdir) -> Iterator[None]:
    """Let the body check out other commits; put the worktree back where it was after."""
    where = head_ref(workdir.worktree)
    try:
        yield
    finally:
        if where.startswith("refs/heads/"):
            git(
                workdir.worktree,
                "checkout",
                "--force",
                "--quiet",
                where.removeprefix("refs/heads/"),
            )
        else:
            git(workdir.worktree, "checkout", "--force", "--quiet", "--detach", where)


# --- The last good commit ----------------------------------------------------------------


@dataclass(frozen=True)
class KnownGood:
    """The last good commit (``None`` when none was found, ``notes`` say why), where it came
    from, and ``bad``: the commit closest to it where the reproduction failed (the head when
    nothing nearer was tried), which is where bisect should start."""

    commit: str | None
    source: Literal["deployment", "policy", "walk_back"] | None
    head: str
    bad: str
    tested: tuple[Tested, ...]
    notes: tuple[str, ...]
    distance: int | None = None  # first-parent commits back from the head, when walked

    @property
    def test_runs(self) -> int:
        return sum(t.test_run for t in self.tested)

    def summary(self) -> str:
        lines = []
        if self.commit is None:
            lines.append("No good commit was found: the reproduction passed nowhere it was tried.")
        else:
            where = {
                "deployment": "the deployment before the error was first seen",
                "policy": "the policy's known_good",
                "walk_back": f"{self.distance} first-parent commits before the head",
            }[self.source or "walk_back"]
            lines.append(
                f"The last good commit is {self.commit[:12]} ({where}): "
                "the reproduction passes there."
            )
        lines.append(
            f"Tried {len(self.tested)} commits ({self.test_runs} test runs): "
            + ", ".join(f"{t.commit[:12]} {t.verdict}" for t in self.tested)
            + "."
        )
        lines.extend(self.notes)
        # why a commit could not say: a setup that fails everywhere is the answer to give
        lines.extend(
            f"  {t.commit[:12]} skipped: {t.reason}"
            for t in self.tested[:10]
            if t.verdict == "skip"
        )
        return "\n".join(lines)[:4000]

    def to_evidence(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "source": self.source,
            "head": self.head,
            "bad": self.bad,
            "distance": self.distance,
            "test_runs": self.test_runs,
            "tested": [t.to_evidence() for t in self.tested],
            "notes": list(self.notes),
        }


def known_good(
    workdir: Workdir,
    work: WorkPolicy,
    reproduction: ReproductionLike,
    *,
    head: str,
    deployed_before: str | None,
) -> KnownGood:
    """Find the last good commit before ``head`` (see the module's docstring). A candidate
    that is not in the repository, not an ancestor of the head, or where the reproduction
    does not pass, is noted and the next way is tried."""
    tree = workdir.worktree
    head_sha = resolve(tree, head)
    if head_sha is None:
        raise LocateError(f"the repository has no commit {head!r}")
    tested: list[Tested] = []
    notes: list[str] = []
    bad = head_sha

    def attempt(sha: str) -> Tested:
        result = try_commit(workdir, work, reproduction, sha, f"known-good-{len(tested) + 1:02d}")
        tested.append(result)
        return result

    with on_commits(workdir):
        given = (
            ("deployment", "the deployment before the first sighting", deployed_before),
            ("policy", "the policy's known_good", work.known_good),
        )
        for source, label, ref in given:
            if ref is None:
                continue
            sha = resolve(tree, ref)
            if sha is None:
                notes.append(f"{label} ({ref[:60]}) is not in the repository{_shallow(tree)}.")
                continue
            if sha == head_sha or not is_ancestor(tree, sha, head_sha):
                notes.append(f"{label} ({ref[:60]}) is not an ancestor of the head.")
                continue
            result = attempt(sha)
            if result.verdict == "good":
                return KnownGood(sha, source, head_sha, bad, tuple(tested), tuple(notes))  # type: ignore[arg-type]
            notes.append(f"{label} ({ref[:60]}) is not good: {_said(result)}.")
        chain = first_parents(tree, head_sha, limit=work.walk_back + 1)
        for distance in _doubling(len(chain) - 1):
            result = attempt(chain[distance])
            if result.verdict == "good":
                return KnownGood(
                    chain[distance],
                    "walk_back",
                    head_sha,
                    bad,
                    tuple(tested),
                    tuple(notes),
                    distance,
                )
            if result.verdict == "bad":
                bad = chain[distance]
    if len(chain) <= 1:
        notes.append("The head has no earlier commit to try.")
    elif len(chain) <= work.walk_back:
        end = "the shallow mirror's boundary" if is_shallow(tree) else "the first commit"
        notes.append(
            f"The walk reached {end}, {len(chain) - 1} first-parent commits back"
            + (
                ": deepen the mirror (git fetch --unshallow) to look further."
                if is_shallow(tree)
                else "."
            )
        )
    else:
        notes.append(
            f"The walk stopped at the policy's walk_back bound ({work.walk_back} "
            "first-parent commits); raise it to look further."
        )
    return KnownGood(None, None, head_sha, bad, tuple(tested), tuple(notes))


def _doubling(depth: int) -> list[int]:
    """1, 2, 4… below ``depth``, then ``depth`` itself (the farthest commit allowed)."""
    steps, step = [], 1
    while step < depth:
        steps.append(step)
        step *= 2
    if depth >= 1:
        steps.append(depth)
    return steps


def _said(result: Tested) -> str:
    return "the reproduction fails there" if result.verdict == "bad" else result.reason


def _shallow(tree: Path) -> str:
    return " (the mirror is shallow: older commits are not in it)" if is_shallow(tree) else ""


# --- Bisect ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Location:
    """What bisect found: the culprit (``None`` when skipped commits hide it: ``candidates``
    are then the commits it may be), every commit tested with its verdict, the test runs made
    against the bound ⌈log2(n)⌉ + 2 for the ``commits`` n after the good commit, and which
    frames of the signal the culprit changed."""

    good: str
    bad: str
    culprit: Commit | None
    candidates: tuple[Commit, ...]
    tested: tuple[Tested, ...]
    commits: int
    files_changed: tuple[str, ...] = ()
    frames_changed: tuple[dict[str, Any], ...] = ()

    @property
    def test_runs(self) -> int:
        return sum(t.test_run for t in self.tested)

    @property
    def bound(self) -> int:
        return math.ceil(math.log2(self.commits)) + 2 if self.commits > 0 else 2

    @property
    def mainline(self) -> int | None:
        """How to revert the culprit: ``1`` for a merge (against its first parent)."""
        return 1 if self.culprit is not None and self.culprit.is_merge else None

    def changed(self) -> str:
        if self.frames_changed:
            return ", ".join(f["where"] for f in self.frames_changed[:3])
        if self.files_changed:
            more = f" and {len(self.files_changed) - 3} more" if len(self.files_changed) > 3 else ""
            return f"none of the signal's frames ({', '.join(self.files_changed[:3])}{more})"
        return "no file"

    def plan(self) -> str:
        """``revert <sha> (<subject>, <author>), which changed <frame>``: the plan the quest
        records with its reproduction."""
        if self.culprit is None:
            return ""
        c = self.culprit
        merge = "; a merge, reverted against its first parent" if c.is_merge else ""
        return f"revert {c.short} ({c.subject}, {c.author}{merge}), which changed {self.changed()}"

    def summary(self) -> str:
        lines = []
        if self.culprit is not None:
            kind = (
                " (a merge: its changes came from another branch)" if self.culprit.is_merge else ""
            )
            lines.append(f"The culprit is {self.culprit.describe()}{kind}.")
            lines.append(f"It changed {self.changed()}.")
        else:
            lines.append(
                "No single culprit: the commits that would decide could not be tested. "
                "It is one of: " + ", ".join(c.describe() for c in self.candidates[:10]) + "."
            )
        lines.append(
            f"Bisected {self.commits} first-parent commits after {self.good[:12]} (good) up to "
            f"{self.bad[:12]} (bad): {self.test_runs} test runs (bound ⌈log2({self.commits})⌉ + 2"
            f" = {self.bound})."
        )
        lines.extend(
            f"  {t.commit[:12]} {t.verdict}{': ' + t.reason if t.reason else ''}"
            for t in self.tested[:30]
        )
        return "\n".join(lines)[:4000]

    def to_evidence(self) -> dict[str, Any]:
        return {
            "good": self.good,
            "bad": self.bad,
            "culprit": self.culprit.to_evidence() if self.culprit else None,
            "candidates": [c.to_evidence() for c in self.candidates[:20]],
            "commits": self.commits,
            "test_runs": self.test_runs,
            "bound": self.bound,
            "tested": [t.to_evidence() for t in self.tested],
            "files_changed": list(self.files_changed[:50]),
            "frames_changed": list(self.frames_changed),
        }


def bisect(
    workdir: Workdir,
    work: WorkPolicy,
    reproduction: ReproductionLike,
    *,
    good: str,
    bad: str,
    signal: SignalFacts | None = None,
) -> Location:
    """Bisect the first-parent commits after ``good`` up to ``bad`` (``bad`` itself is taken
    as failing, ``good`` as passing: neither is run again). Runs are named ``bisect-<nn>-…``.
    With ``signal``, the location says which of its frames the culprit changed."""
    tree = workdir.worktree
    good_sha, bad_sha = resolve(tree, good), resolve(tree, bad)
    if good_sha is None or bad_sha is None:
        missing = good if good_sha is None else bad
        raise LocateError(f"the repository has no commit {missing!r}{_shallow(tree)}")
    if good_sha == bad_sha or not is_ancestor(tree, good_sha, bad_sha):
        raise LocateError(f"{good[:40]} is not an ancestor of {bad[:40]}: nothing to bisect")
    chain = list(reversed(first_parents(tree, bad_sha, since=good_sha)))  # oldest first
    low, high = -1, len(chain) - 1  # chain[low] passes (the good commit), chain[high] fails
    skipped: set[int] = set()
    tested: list[Tested] = []
    with on_commits(workdir):
        while high - low > 1:
            index = _pick(low, high, skipped)
            if index is None:
                break
            result = try_commit(
                workdir, work, reproduction, chain[index], f"bisect-{len(tested) + 1:02d}"
            )
            tested.append(result)
            if result.verdict == "good":
                low = index
            elif result.verdict == "bad":
                high = index
            else:
                skipped.add(index)
    found = commits(tree, chain[low + 1 : high + 1])
    candidates = tuple(found[sha] for sha in chain[low + 1 : high + 1] if sha in found)
    culprit = candidates[0] if len(candidates) == 1 else None
    files, frames = _what_changed(tree, culprit, signal) if culprit else ((), ())
    return Location(
        good_sha, bad_sha, culprit, candidates, tuple(tested), len(chain), files, frames
    )


def _pick(low: int, high: int, skipped: set[int]) -> int | None:
    """The middle of the untested commits, or the nearest to it not skipped."""
    middle = (low + high) // 2
    for offset in range(high - low):
        for index in (middle + offset, middle - offset):
            if low < index < high and index not in skipped:
                return index
    return None


def _what_changed(
    tree: Path, culprit: Commit, signal: SignalFacts | None
) -> tuple[tuple[str, ...], tuple[dict[str, Any], ...]]:
    """The files the culprit changed (against its first parent), and the signal's frames of
    the application whose function (or line) it changed, or whose file."""
    parent = culprit.parents[0] if culprit.parents else None
    touched = changed_lines(tree, culprit.sha, parent)
    files = tuple(sorted(touched))
    if signal is None:
        return files, ()
    frames = []
    for match in map_frames(repository_files(tree, culprit.sha), signal.frames):
        if match.path is None or not match.frame.in_app or match.path not in touched:
            continue
        span = frame_lines(file_lines(tree, culprit.sha, match.path), match.frame)
        in_function = span is not None and overlaps(touched[match.path], span)
        where = f"{match.path} in {match.frame.function}()" if in_function else match.path
        frames.append(
            {
                "frame": match.index,
                "path": match.path,
                "function": match.frame.function[:200],
                "changed": "function" if in_function else "file",
                "where": where,
            }
        )
    frames.sort(key=lambda f: (f["changed"] != "function", f["frame"]))
    # A file named once for a function it changed need not be named again for itself.
    named = {f["path"] for f in frames if f["changed"] == "function"}
    kept = [f for f in frames if f["changed"] == "function" or f["path"] not in named]
    return files, tuple({f["where"]: f for f in kept}.values())


__all__ = [
    "ExitStatusReproduction",
    "KnownGood",
    "LocateError",
    "Location",
    "Tested",
    "bisect",
    "known_good",
    "on_commits",
    "try_commit",
]
