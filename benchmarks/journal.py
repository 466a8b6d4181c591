"""Benchmark: journal appends against raw pygit2 and the git CLI, and rebuilding quest state.

``.venv/bin/python benchmarks/journal.py [--quests N] [--per-quest M] [--cli-quests K]
[--fsync-quests F] [--rounds R]``. Every quest gets the same M transitions (the main line, then
comments and usage), sent round-robin: transition k of every quest, then k+1. The events and
decisions are computed before any timing (``decide`` is the core's cost, not the journal's).

- **ephyra journal**: ``Journal.append`` — serialise quest/event/effects and the commit message
  (whose trailers hold the decision), build the tree from the parent's, commit, CAS the ref.
- **raw pygit2**: the same objects written with the plain calls, every file's bytes prepared in
  advance (untimed): ``create_blob`` for each file, ``TreeBuilder`` from the parent tree,
  ``create_commit``, ``Reference.set_target`` (``references.create`` for a new quest).
- **git CLI**: ``git hash-object -w --stdin-paths``, ``git mktree``, ``git commit-tree``,
  ``git update-ref <ref> <new> <old>``: 4-6 processes per transition, so it runs on fewer quests
  (``--cli-quests``) and its rate is scaled to the full count (the table says so).

Ours and raw alternate one transition at a time so that a noisy machine slows both alike, in R
rounds (5), each with a fifth of the quests and its own pair of fresh repositories; the target is
judged on the median round, because on a loaded machine two identical journals written this way
came out between 0.69x and 1.20x of each other in single runs, while the median of five rounds
stayed within 1.00x-1.02x. All three must produce the *same commit ids*; the benchmark checks
that before it prints anything and exits 1 if not. fsync: libgit2 does not fsync by default;
the repository's ``core.fsyncObjectFiles=true`` (or ``pygit2.settings.enable_fsync_gitdir``)
makes it fsync each loose object, each ref and their directories; git takes
``core.fsync=loose-object,reference``. Runs with fsync use ``--fsync-quests`` quests.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pygit2

if __package__ in (None, ""):  # run as a script: put the project root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ephyra.core.events import BaseEvent, event_to_dict, parse_event
from ephyra.core.machine import Decision, decide
from ephyra.core.proof import CheckResult, ProofBundle
from journal.format import INDEX_EVERY, REF_PREFIX, commit_message, pretty_json
from journal.store import Journal

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
BASE, HEAD = "a" * 40, "b" * 40
BLOB, TREE = pygit2.GIT_FILEMODE_BLOB, pygit2.GIT_FILEMODE_TREE
TARGET = 0.8  # the journal's append rate must reach this multiple of raw pygit2's


@dataclass
class Step:
    """One transition and, prepared for raw/CLI, the exact files it writes."""

    event: BaseEvent
    decision: Decision
    files: list[tuple[str, bytes]] = field(default_factory=list)  # top-level name, content
    nested: list[tuple[str, str, bytes]] = field(default_factory=list)  # folder, name, content
    when: tuple[int, int] = (0, 0)  # (unix time, offset minutes)


def _main_line(qid: str) -> list[tuple[str, dict[str, Any]]]:
    approve = {"verdict": "approve", "actor": "alice"}
    signal = {
        "id": f"s-{qid}",
        "fingerprint": f"fp-{qid}",
        "severity": "error",
        "title": "KeyError",
    }
    return [
        ("signal_sensed", {"signal": signal}),
        ("triage_decided", {"route": "auto_fix", "risk": "medium"}),
        ("research_started", {}),
        ("hypothesis_written", {"summary": "the cache key ignores the locale"}),
        ("checkpoint_decided", {"checkpoint": "A", **approve}),
        ("reproduction_recorded", {"probe": "pytest -k locale", "plan": "key by locale"}),
        ("checkpoint_decided", {"checkpoint": "B", **approve}),
        ("patch_recorded", {"head": HEAD, "base": BASE}),
        ("proof_completed", _proof(qid)),
        ("checkpoint_decided", {"checkpoint": "C", **approve}),
    ]


def _events(qid: str, count: int) -> list[tuple[BaseEvent, Decision]]:
    """The main line as far as it goes (10 events), then comments and usage receipts."""
    main = _main_line(qid)
    out, quest = [], None
    for n in range(1, count + 1):
        if n <= len(main):
            type_, fields = main[n - 1]
        elif n % 2:
            type_, fields = "comment_added", {"body": f"note {n}", "reply_requested": n % 3 == 0}
        else:
            type_, fields = "usage_recorded", {"source": "runner", "tokens": n}
        at = (T0 + timedelta(minutes=n)).isoformat()
        event = parse_event(
            {"id": f"{qid}-e{n:03d}", "quest": qid, "at": at, "type": type_} | fields
        )
        decision = decide(quest, event)
        assert decision.accepted, (event.type, decision.reason)
        out.append((event, decision))
        quest = decision.quest
    return out


def _proof(qid: str) -> dict[str, Any]:
    check = CheckResult(name="tests", command="pytest", passed=True, duration_ms=812)
    bundle = ProofBundle(
        quest=qid, revision=1, risk="medium", base=BASE, head=HEAD, checks=(check,)
    )
    return {"bundle": bundle.model_dump(mode="json"), "digest": bundle.digest()}


def _prepare(qid: str, count: int) -> list[Step]:
    """The bytes of every file each transition writes, exactly as ``Journal.append`` lays them
    out (the benchmark checks the commit ids agree)."""
    steps, before = [], None
    for event, decision in _events(qid, count):
        q = decision.quest
        files = [
            ("quest.json", pretty_json(q.to_dict())),
            ("event.json", pretty_json(event_to_dict(event))),
            ("effects.json", pretty_json([e.to_dict() for e in decision.effects])),
        ]
        nested = []
        if before is None:
            files.append(("signal.json", pretty_json(event.signal.model_dump(mode="json"))))
        for name, text, old in (
            ("hypothesis.md", q.hypothesis, before and before.hypothesis),
            ("plan.md", q.plan, before and before.plan),
        ):
            if text and text != old:
                files.append((name, (text if text.endswith("\n") else text + "\n").encode()))
        if event.type == "proof_completed":
            proof = {"bundle": event.bundle.model_dump(mode="json"), "digest": event.digest}
            nested.append(("proof", "bundle.json", pretty_json(proof)))
        if event.type == "checkpoint_decided":
            record = q.to_dict()["decisions"][-1]
            name = f"{len(q.decisions):03d}-{record['checkpoint']}.json"
            nested.append(("decisions", name, pretty_json(record)))
        offset = int(event.at.utcoffset().total_seconds()) // 60
        steps.append(Step(event, decision, files, nested, (int(event.at.timestamp()), offset)))
        before = q
    return steps


def _workload(quests: int, per: int) -> list[list[Step]]:
    return [_prepare(f"q{i:05d}", per) for i in range(quests)]


# --- the three writers ------------------------------------------------------------------------


def _new_repo(root: Path, name: str, fsync: bool) -> pygit2.Repository:
    repo = pygit2.init_repository(str(root / name), bare=True)
    if fsync:
        repo.config["core.fsyncObjectFiles"] = True
        repo = pygit2.Repository(str(root / name))
    return repo


class Raw:
    """The same commits with the plain pygit2 calls, every byte prepared before the timer."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo
        self.refs: dict[str, pygit2.Reference] = {}
        self.heads: dict[str, pygit2.Oid] = {}
        self.trees: dict[str, pygit2.Oid] = {}

    def write(self, step: Step, message: str) -> None:
        repo, qid = self.repo, step.event.quest
        parent = self.heads.get(qid)
        builder = repo.TreeBuilder(repo[self.trees[qid]]) if parent else repo.TreeBuilder()
        for name, data in step.files:
            builder.insert(name, repo.create_blob(data), BLOB)
        for folder, name, data in step.nested:
            entry = builder.get(folder)
            sub = repo.TreeBuilder(repo[entry.id]) if entry else repo.TreeBuilder()
            sub.insert(name, repo.create_blob(data), BLOB)
            builder.insert(folder, sub.write(), TREE)
        tree = builder.write()
        sig = pygit2.Signature("Ephyra", "ephyra@localhost", *step.when)
        oid = repo.create_commit(None, sig, sig, message, tree, [parent] if parent else [])
        if parent is None:
            self.refs[qid] = repo.references.create(REF_PREFIX + qid, oid)
        else:
            self.refs[qid].set_target(oid)
        self.heads[qid], self.trees[qid] = oid, tree


def run_cli(path: Path, work: list[list[Step]], fsync: bool) -> tuple[float, dict[str, str]]:
    cfg = (
        ["-c", "core.fsync=loose-object,reference", "-c", "core.fsyncMethod=fsync"]
        if fsync
        else ["-c", "core.fsync=none"]
    )
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    git = ["git", "--git-dir", str(path), *cfg]
    scratch = path.parent / "cli-files"  # under the run's root, removed with it
    scratch.mkdir()
    heads: dict[str, str] = {}
    entries: dict[str, dict[str, tuple[str, str, str]]] = {}  # quest -> name -> (mode,type,oid)
    subtrees: dict[str, dict[str, dict[str, str]]] = {}  # quest -> folder -> name -> oid

    def out(args: list[str], data: str | None = None, env: dict | None = None) -> str:
        return subprocess.run(
            git + args, input=data, capture_output=True, text=True, check=True, env=env
        ).stdout

    def mktree(rows: dict[str, tuple[str, str, str]]) -> str:
        text = "".join(f"{m} {t} {o}\t{n}\n" for n, (m, t, o) in sorted(rows.items()))
        return out(["mktree"], text).strip()

    t0 = time.perf_counter()
    for k in range(len(work[0])):
        for steps in work:
            step = steps[k]
            qid = step.event.quest
            parent = heads.get(qid)
            message = commit_message(step.decision, step.event, parent and pygit2.Oid(hex=parent))
            blobs = [data for _, data in step.files] + [data for _, _, data in step.nested]
            paths = []
            for i, data in enumerate(blobs):
                p = scratch / f"{i}"
                p.write_bytes(data)
                paths.append(str(p))
            oids = out(["hash-object", "-w", "--stdin-paths"], "\n".join(paths) + "\n").split()
            rows = entries.setdefault(qid, {})
            for (name, _), oid in zip(step.files, oids, strict=False):
                rows[name] = ("100644", "blob", oid)
            for (folder, name, _), oid in zip(step.nested, oids[len(step.files) :], strict=True):
                sub = subtrees.setdefault(qid, {}).setdefault(folder, {})
                sub[name] = oid
                rows[folder] = (
                    "040000",
                    "tree",
                    mktree({n: ("100644", "blob", o) for n, o in sub.items()}),
                )
            tree = mktree(rows)
            minutes = step.when[1]
            date = (
                f"@{step.when[0]} {'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}"
                f"{abs(minutes) % 60:02d}"
            )
            who = {"NAME": "Ephyra", "EMAIL": "ephyra@localhost", "DATE": date}
            env = os.environ | {
                f"GIT_{role}_{key}": v for role in ("AUTHOR", "COMMITTER") for key, v in who.items()
            }
            parents = ["-p", parent] if parent else []
            commit = out(["commit-tree", tree, *parents, "-F", "-"], message, env).strip()
            # <old> = the expected head (all zeros: must not exist yet): git's own CAS
            out(["update-ref", REF_PREFIX + qid, commit, parent or "0" * 40])
            heads[qid] = commit
    elapsed = time.perf_counter() - t0
    shutil.rmtree(scratch)
    return elapsed, heads


# --- rebuilding state -------------------------------------------------------------------------


def rebuild(path: Path, quest_ids: list[str]) -> float:
    journal = Journal(str(path))  # a fresh repository object: no warm libgit2 object cache
    t0 = time.perf_counter()
    for qid in quest_ids:
        quest, _ = journal.load(qid)
        assert quest is not None
    return time.perf_counter() - t0


# --- the run ----------------------------------------------------------------------------------


class Compared(NamedTuple):
    rounds: list[tuple[float, float]]  # (ours seconds, raw seconds) per round
    heads: dict[str, str]  # quest -> head commit, the same for ours and raw
    repos: list[tuple[Path, list[str]]]  # our repository of each round and its quests

    @property
    def ours(self) -> float:
        return sum(o for o, _ in self.rounds)

    @property
    def raw(self) -> float:
        return sum(r for _, r in self.rounds)

    @property
    def ratios(self) -> list[float]:
        """Our rate over raw's, per round."""
        return [r / o for o, r in self.rounds]


def compare(root: Path, quests: int, per: int, fsync: bool, rounds: int) -> Compared:
    """Ours and raw, interleaved one transition at a time (alternating which goes first), so
    that a busy machine slows both alike; in ``rounds`` rounds, each with a share of the quests
    and its own two fresh repositories, so that a slow spell of one repository's directories
    (the disk is shared) weighs on one round, not on the whole answer."""
    work = _workload(quests, per)
    out = Compared([], {}, [])
    clock = time.perf_counter
    for r in range(rounds):
        part = work[r * quests // rounds : (r + 1) * quests // rounds]
        journal = Journal(_new_repo(root, f"ours-{r}.git", fsync))
        raw = Raw(_new_repo(root, f"raw-{r}.git", fsync))
        heads: dict[str, pygit2.Oid] = {}
        t_ours = t_raw = 0.0
        for k in range(per):  # round-robin: transition k of every quest, then k + 1
            for i, steps in enumerate(part):
                step = steps[k]
                qid = step.event.quest
                message = commit_message(step.decision, step.event, raw.heads.get(qid))  # untimed
                for who in ("ours", "raw") if (i + k) % 2 else ("raw", "ours"):
                    t0 = clock()
                    if who == "ours":
                        heads[qid] = journal.append(qid, heads.get(qid), step.decision, step.event)
                        t_ours += clock() - t0
                    else:
                        raw.write(step, message)
                        t_raw += clock() - t0
        if heads != raw.heads:
            sys.exit("raw pygit2 and the journal wrote different commits: the comparison is void")
        out.rounds.append((t_ours, t_raw))
        out.heads.update({q: str(h) for q, h in heads.items()})
        out.repos.append((Path(journal.path), list(heads)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quests", type=int, default=1000)
    parser.add_argument("--per-quest", type=int, default=10)
    parser.add_argument("--cli-quests", type=int, default=50, help="quests the git CLI writes")
    parser.add_argument("--fsync-quests", type=int, default=100, help="quests for fsync runs")
    parser.add_argument("--no-fsync-runs", action="store_true", help="skip the fsync rows")
    parser.add_argument("--rounds", type=int, default=5, help="ours-vs-raw rounds (median)")
    args = parser.parse_args(argv)
    if args.per_quest > INDEX_EVERY:
        # Past it the journal adds its ids/ index (docs/journal.md, "Event ids"), which the raw
        # and git CLI writers do not write, so their commit ids could not agree.
        parser.error(f"--per-quest is at most {INDEX_EVERY}: past it the journal writes ids/")
    n, per = args.quests, args.per_quest
    total = n * per
    root = Path(tempfile.mkdtemp(prefix="ephyra-journal-bench-"))
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    print(f"# journal benchmark: {n} quests x {per} transitions, round-robin")
    print(
        f"# python {platform.python_version()}, pygit2 {pygit2.__version__}, libgit2 "
        f"{pygit2.LIBGIT2_VERSION}, {git_version.strip()}, {os.cpu_count()} CPUs, "
        f"repos in {root}"
    )
    rows: list[tuple[str, str, int, float]] = []
    ratios: dict[str, list[float]] = {}
    try:
        runs = [(False, n)] + ([] if args.no_fsync_runs else [(True, args.fsync_quests)])
        repos: list[tuple[Path, list[str]]] = []
        for fsync, count in runs:
            sub = root / ("fsync" if fsync else "nofsync")
            sub.mkdir()
            compared = compare(sub, count, per, fsync, min(args.rounds, count))
            if not fsync:
                repos = compared.repos
            flag = "on" if fsync else "off"
            ratios[flag] = compared.ratios
            rows.append(("ephyra journal append", flag, count * per, compared.ours))
            rows.append(
                ("raw pygit2 (create_commit + set_target)", flag, count * per, compared.raw)
            )
            cli_n = min(args.cli_quests, count) if not fsync else min(args.cli_quests // 2, count)
            t_cli, cli_heads = run_cli(sub / "cli.git", _workload(cli_n, per), fsync)
            if any(compared.heads[q] != h for q, h in cli_heads.items()):
                sys.exit("the git CLI wrote different commits than the journal")
            rows.append(("git CLI (commit-tree + update-ref)", flag, cli_n * per, t_cli))
        _print_writes(rows, ratios, total)
        _print_rebuild(repos, total)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _print_writes(rows: list, ratios: dict[str, list[float]], total: int) -> None:
    print(f"\n## append {total} transitions (lower µs is better; ratio = our rate / raw rate)\n")
    print(
        "| writer | fsync | transitions run | seconds | µs / transition "
        f"| transitions/s | time for {total} | rate vs raw pygit2 |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    raw_rate = {r[1]: r[2] / r[3] for r in rows if r[0].startswith("raw")}
    for name, flag, count, seconds in rows:
        rate = count / seconds
        scaled = "" if count == total else " (scaled)"
        print(
            f"| {name} | {flag} | {count} | {seconds:.2f} | {seconds / count * 1e6:.0f} | "
            f"{rate:.0f} | {total / rate:.1f} s{scaled} | "
            f"{rate / raw_rate[flag]:.2f}x |"
        )
    print()
    for flag, each in ratios.items():
        median = statistics.median(each)
        verdict = "met" if median >= TARGET else "NOT met"
        rounds = ", ".join(f"{x:.2f}x" for x in each)
        print(
            f"target: journal append >= {TARGET:.1f}x the raw pygit2 rate, fsync {flag}: "
            f"median of {len(each)} rounds {median:.2f}x ({verdict}); rounds {rounds}"
        )
    print(
        "- all three writers produced the same commit ids (checked before printing).\n"
        "- raw pygit2 gets every file's bytes and the commit message prepared before its timer;\n"
        "  the journal serialises, validates and formats inside it. Ours and raw alternate one\n"
        "  transition at a time; rows with fewer transitions are scaled to the full count.\n"
        "- the target is judged on the median round (each round: its own fresh pair of\n"
        "  repositories); on a loaded machine two identical writers can differ by 30% in one\n"
        "  round. The table's ratio sums all rounds.\n"
        "- fsync off: libgit2's default, git with core.fsync=none. fsync on: the repository's\n"
        "  core.fsyncObjectFiles=true (libgit2 then fsyncs every loose object, ref and their\n"
        "  directories), git with core.fsync=loose-object,reference and core.fsyncMethod=fsync."
    )


def _print_rebuild(repos: list[tuple[Path, list[str]]], transitions: int) -> None:
    def count(path: Path) -> dict[str, int]:
        text = subprocess.run(
            ["git", "--git-dir", str(path), "count-objects", "-v"], capture_output=True, text=True
        ).stdout
        rows = (line.split(": ") for line in text.splitlines())
        return {key: int(value) for key, value in rows if key in {"count", "in-pack", "packs"}}

    loose = sum(rebuild(path, ids) for path, ids in repos)
    before = [count(path) for path, _ in repos]
    for path, _ in repos:
        subprocess.run(["git", "--git-dir", str(path), "gc", "-q"], check=True)
        subprocess.run(["git", "--git-dir", str(path), "repack", "-adq"], check=True)
    packed = sum(rebuild(path, ids) for path, ids in repos)
    after = [count(path) for path, _ in repos]
    n = sum(len(ids) for _, ids in repos)
    print(f"\n## rebuild the latest state of {n} quests (head → quest.json → Quest)\n")
    print("| objects | seconds | µs / quest |")
    print("|---|---:|---:|")
    print(f"| loose | {loose:.3f} | {loose / n * 1e6:.0f} |")
    print(
        f"| after git gc + repack -ad (refs packed too) | {packed:.3f} | {packed / n * 1e6:.0f} |"
    )
    written = sum(c["count"] for c in before)
    print(
        f"\n- each read opens a fresh Repository (no warm libgit2 object cache); the OS page\n"
        f"  cache is warm.\n- objects written: {written} loose ({written / transitions:.1f} per "
        f"transition, in {len(repos)} repositories); after gc: "
        f"{sum(c['in-pack'] for c in after)} in {sum(c['packs'] for c in after)} packs, "
        f"{sum(c['count'] for c in after)} loose."
    )


if __name__ == "__main__":
    raise SystemExit(main())
