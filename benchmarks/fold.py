"""Benchmark: ``ephyra.core.machine.fold`` against the same machine in ``transitions`` and as a
hand-written dict table.

``make bench`` runs ``.venv/bin/python benchmarks/fold.py [--events N] [--quests M] [--repeat K]``.
All three take the same event objects in the same process. Before any timing is shown they must
agree on every decision (outcome, state, revision, effect keys and payloads) and on every quest's
final state; if they do not, the first difference is printed and the exit status is 1.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ephyra.core.events import BaseEvent, parse_event
from ephyra.core.machine import fold
from ephyra.core.proof import CheckResult, ProofBundle
from ephyra.core.rules import MachinePolicy

if __package__ in (None, ""):  # run as a script: put the project root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import dict_table, transitions_machine

# Enough proof attempts that the failure loops stay in patching instead of parking.
POLICY = MachinePolicy(proof_attempts=50, required_checks={"medium": ("tests",)})
OURS, TRANSITIONS, TABLE = "ephyra fold", "transitions", "dict table"
IMPLEMENTATIONS: dict[str, Callable[[Sequence[BaseEvent]], Any]] = {
    OURS: lambda events: fold(events, POLICY),
    TRANSITIONS: lambda events: transitions_machine.fold(events, POLICY),
    TABLE: lambda events: dict_table.fold(events, POLICY),
}
TARGETS = ((TRANSITIONS, 3.0), (TABLE, 0.6))  # ours must reach this multiple of their events/s
INTERLEAVING = "round-robin (one event of each quest in turn)"
MEMORY_SLICE = 10  # peak memory is measured on the events of the first 1/10 of the quests

LOOPS = 5  # proof_failed -> patch_recorded loops per quest
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
BASE, COMMIT = "a" * 40, "c" * 40
HEADS = [f"{i:02x}" * 20 for i in range(LOOPS + 1)]
PAUSE = (("paused", {"reason": "operator"}), ("resumed", {}))
SIGNAL = {"id": "s-tmpl", "fingerprint": "fp-tmpl", "severity": "error", "title": "KeyError"}


def main_line() -> list[tuple[str, dict[str, Any]]]:
    """The events every quest goes through, pauses included; fillers come on top."""
    approve = {"verdict": "approve", "actor": "alice"}
    steps = [
        ("signal_sensed", {"signal": SIGNAL}),
        ("triage_decided", {"route": "auto_fix", "risk": "medium"}),
        ("research_started", {}),
        *PAUSE,  # while researching: stop_agent, then research again
        ("hypothesis_written", {"summary": "the cache key ignores the locale"}),
        *PAUSE,  # at checkpoint A: asked again on resume
        ("checkpoint_decided", {"checkpoint": "A", **approve}),
        ("reproduction_recorded", {"probe": "pytest -k locale", "plan": "key on the locale"}),
        ("checkpoint_decided", {"checkpoint": "B", **approve}),
        ("patch_recorded", {"head": HEADS[0], "base": BASE}),
    ]
    for i in range(1, LOOPS + 1):
        steps.append(("proof_failed", {"reason": f"check {i} failed"}))
        if i == 2:
            steps += PAUSE  # while patching
        steps.append(("patch_recorded", {"head": HEADS[i], "base": BASE}))
    bundle = ProofBundle(
        quest="tmpl", revision=1, risk="medium", base=BASE, head=HEADS[LOOPS],
        checks=(CheckResult(name="tests", command="pytest", passed=True, duration_ms=812),),
    )  # fmt: skip
    steps += [
        ("proof_completed", {"bundle": bundle.model_dump(mode="json"), "digest": bundle.digest()}),
        *PAUSE,  # at checkpoint C
        ("checkpoint_decided", {"checkpoint": "C", "verdict": "approve", "actor": "bob"}),
        ("landed", {"commit": COMMIT}),
        ("watch_clean", {}),
    ]
    return steps


FILLERS = [  # a cycle of nine: six usage receipts, three comments (one asks for a reply)
    ("usage_recorded", {"source": "runner", "cost_micros": 1200, "runner_seconds": 3}),
    ("usage_recorded", {"source": "model", "cost_micros": 9000, "tokens": 4100}),
    ("comment_added", {"body": "looks plausible", "actor": "carol"}),
] * 2 + [
    ("usage_recorded", {"source": "runner", "runner_seconds": 40}),
    ("usage_recorded", {"source": "model", "tokens": 900}),
    ("comment_added", {"body": "why the locale?", "actor": "dave", "reply_requested": True}),
]


def _template(type_: str, fields: dict[str, Any]) -> BaseEvent:
    data = {"id": "tmpl-e0", "quest": "tmpl", "at": T0.isoformat(), "type": type_}
    return parse_event({**data, **fields})  # validated once per shape


def build_workload(n_events: int, n_quests: int) -> list[BaseEvent]:
    """Every quest's events (main line, fillers spread between its steps), interleaved."""
    core = [_template(t, f) for t, f in main_line()]
    fillers = [_template(t, f) for t, f in FILLERS]
    per, extra = divmod(n_events, n_quests)
    if per < len(core):
        raise SystemExit(f"need at least {len(core)} events per quest, got {per}")
    ats = [T0 + timedelta(minutes=n) for n in range(per + 2)]
    streams = []
    for i in range(n_quests):
        qid = f"q{i:05d}"
        n_fill, gaps = per + (i < extra) - len(core), len(core) - 1
        seq: list[BaseEvent] = []
        for j, tmpl in enumerate(core):
            seq.append(tmpl)
            if j < gaps:  # fillers go between main-line events, none after the last
                spread = range(j * n_fill // gaps, (j + 1) * n_fill // gaps)
                seq += [fillers[f % len(fillers)] for f in spread]
        out = []
        for n, tmpl in enumerate(seq):
            update: dict[str, Any] = {"id": f"{qid}-e{n}", "quest": qid, "at": ats[n]}
            if tmpl.type == "signal_sensed":
                ident = {"id": f"s-{qid}", "fingerprint": f"fp-{qid}"}
                update["signal"] = tmpl.signal.model_copy(update=ident)  # type: ignore[attr-defined]
            elif tmpl.type == "proof_completed":
                bundle = tmpl.bundle.model_copy(update={"quest": qid})  # type: ignore[attr-defined]
                update |= {"bundle": bundle, "digest": bundle.digest()}
            out.append(tmpl.model_copy(update=update))
        streams.append(out)
    longest = max(len(s) for s in streams)
    return [s[k] for k in range(longest) for s in streams if k < len(s)]


def _view(d: Any) -> tuple:
    before, state = (None if s is None else str(s) for s in (d.state_before, d.state))
    effects = [(e.key, e.payload) for e in d.effects]
    return (d.quest_id, d.event_id, d.outcome, before, state, d.revision, effects)


def disagreement(ours: Any, name: str, other: Any) -> str | None:
    """The first difference between ours and another implementation's result, or None."""
    bad = next((d for d in ours.decisions if d.outcome != "accepted"), None)
    if bad is not None:
        return f"the workload is not all valid: {bad.event_id} was {bad.outcome}: {bad.reason}"
    if len(other.decisions) != len(ours.decisions):
        return f"{name} made {len(other.decisions)} decisions, ours {len(ours.decisions)}"
    for a, b in zip(ours.decisions, other.decisions, strict=True):
        if _view(a) != _view(b):
            return f"{name} differs at {a.event_id}:\n  ours: {_view(a)}\n  {name}: {_view(b)}"
    if set(other.quests) != set(ours.quests):
        return f"{name} has other quests than ours"
    for qid, q in ours.quests.items():
        if str(q.state) != str(other.quests[qid].state):
            return f"{name}: {qid} ends {other.quests[qid].state}, ours {q.state}"
    return None


def seconds(run: Callable[[], Any], *, collector: bool) -> float:
    """One timed run. With ``collector=False`` the cyclic GC is off while timing, as ``timeit``
    does by default; none of the three machines makes reference cycles, so what it measures
    then is the machines' own work, and with it on, that work plus full collections that
    traverse every result kept so far."""
    gc.collect()
    if not collector:
        gc.disable()
    try:
        start = time.perf_counter()
        result = run()
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    del result  # this run's result is gone before the next run starts
    return elapsed


def peak_bytes(run: Callable[[], Any]) -> int:
    """Peak of what one run allocates (its result included), by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    result = run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return peak


@dataclass
class Row:
    name: str
    events_per_s: float  # cyclic GC off while timing (the timeit convention)
    events_per_s_gc: float  # cyclic GC on
    peak: int  # bytes, on the memory slice


@dataclass
class Report:
    events: int
    quests: int
    rows: list[Row] = field(default_factory=list)
    mismatch: str | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def rate(self, name: str, *, collector: bool = False) -> float:
        row = next(r for r in self.rows if r.name == name)
        return row.events_per_s_gc if collector else row.events_per_s


def run(
    events: int = 1_000_000, quests: int = 10_000, repeat: int = 3, echo: bool = True
) -> Report:
    report = Report(events, quests)

    def say(line: str = "") -> None:
        report.lines.append(line)
        if echo:
            print(line, flush=True)

    say(f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"{os.cpu_count()} CPUs, {platform.machine()} {platform.system()}")  # fmt: skip
    start = time.perf_counter()
    workload = build_workload(events, quests)
    mem_ids = {f"q{i:05d}" for i in range(max(1, quests // MEMORY_SLICE))}
    mem_slice = [e for e in workload if e.quest in mem_ids]
    say(f"workload: {len(workload):,} events over {quests:,} quests "
        f"({events // quests} per quest), interleaved {INTERLEAVING}; "
        f"built in {time.perf_counter() - start:.1f}s")  # fmt: skip
    gc.collect()
    gc.freeze()
    try:
        ours = IMPLEMENTATIONS[OURS](workload)  # also a warm-up run for each
        n_effects = sum(len(d.effects) for d in ours.decisions)
        for name, impl in IMPLEMENTATIONS.items():
            report.mismatch = report.mismatch or disagreement(ours, name, impl(workload))
        del ours
        if report.mismatch:
            say(f"DISAGREEMENT: {report.mismatch}")
            return report
        say(f"all three agree: every decision's state and all {n_effects:,} effect keys "
            f"and payloads, and every quest's final state")  # fmt: skip
        # Rounds alternate the implementations, so a busy machine slows all three alike.
        best = {(name, c): float("inf") for name in IMPLEMENTATIONS for c in (False, True)}
        for _ in range(repeat):
            for collector in (False, True):
                for name, impl in IMPLEMENTATIONS.items():
                    took = seconds(lambda impl=impl: impl(workload), collector=collector)
                    best[name, collector] = min(best[name, collector], took)
        for name, impl in IMPLEMENTATIONS.items():
            peak = peak_bytes(lambda impl=impl: impl(mem_slice))
            n = len(workload)
            report.rows.append(Row(name, n / best[name, False], n / best[name, True], peak))
    finally:
        gc.unfreeze()
    _table(report, say, repeat, len(mem_slice), len(mem_ids))
    return report


def _table(report: Report, say: Callable[[str], None], repeat: int, n_mem: int, q_mem: int) -> None:
    mem = f"peak memory ({n_mem:,} ev)"
    say("")
    say(f"{'':<16}{'--- cyclic GC off (timeit) ---':>45}{'--- cyclic GC on ---':>45}")
    cols = f"{'events/s':>14}{'x transitions':>16}{'x dict table':>15}"
    say(f"{'implementation':<16}{cols}{cols}{mem:>26}")
    for r in report.rows:
        cells = ""
        for collector, rate in ((False, r.events_per_s), (True, r.events_per_s_gc)):
            t_rate = report.rate(TRANSITIONS, collector=collector)
            d_rate = report.rate(TABLE, collector=collector)
            cells += f"{rate:>14,.0f}{rate / t_rate:>15.2f}x{rate / d_rate:>14.2f}x"
        peak = f"{r.peak / 2**20:.1f} MiB, {r.peak / n_mem:.0f} B/ev"
        say(f"{r.name:<16}{cells}{peak:>26}")
    say("")
    say(
        f"events/s: best of {repeat} rounds, each round running the three in turn, once with "
        "the cyclic GC off while timing and once with it on; gc.collect() before each run, the "
        "workload gc.freeze()d."
    )
    say(
        f"peak memory: tracemalloc peak of one run over the events of the first {q_mem:,} "
        "quests (same shape and interleaving), result list included; workload not counted."
    )
    for collector, label in ((False, "GC off"), (True, "GC on")):
        ours = report.rate(OURS, collector=collector)
        for name, want in TARGETS:
            got = ours / report.rate(name, collector=collector)
            verdict = "met" if got >= want else "NOT met"
            say(f"target ({label}): ours >= {want}x {name}: {got:.2f}x — {verdict}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--quests", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of K runs (default 3)")
    args = parser.parse_args(argv)
    report = run(args.events, args.quests, args.repeat)
    return 1 if report.mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
