"""The fold benchmark runs at a tiny size and its three implementations agree. No timing is
asserted: the numbers only mean something at full size on a quiet machine (``make bench``)."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks import dict_table
from benchmarks import fold as bench
from ephyra.core.events import EVENT_TYPES, parse_event


def test_the_workload_is_real_valid_events_interleaved():
    events = bench.build_workload(2_000, 20)
    assert len(events) == 2_000
    assert set(Counter(e.quest for e in events).values()) == {100}
    for e in events:  # copies of validated templates, and each one validates again as it is
        assert type(e) is EVENT_TYPES[e.type]
        assert parse_event(e.model_dump(mode="json")) == e
    assert [e.quest for e in events[:3]] == ["q00000", "q00001", "q00002"]  # round-robin
    first = Counter(e.type for e in events if e.quest == "q00000")
    assert first["proof_failed"] == 5 and first["paused"] == first["resumed"] == 4


def test_the_three_implementations_agree_and_each_has_a_row():
    report = bench.run(events=2_000, quests=20, repeat=1, echo=False)
    assert report.mismatch is None
    assert [r.name for r in report.rows] == [bench.OURS, bench.TRANSITIONS, bench.TABLE]
    lines = report.text.splitlines()
    for name in (bench.OURS, bench.TRANSITIONS, bench.TABLE):
        row = next(line for line in lines if line.startswith(name))
        assert "events/s" not in row and "MiB" in row
    assert any(line.startswith("target (GC off): ours >= 3.0x transitions") for line in lines)
    assert any(line.startswith("target (GC on): ours >= 0.6x dict table") for line in lines)


def test_a_difference_is_reported_and_fails_the_run(monkeypatch: pytest.MonkeyPatch):
    kind, build = dict_table.BUILD["land"]
    wrong = (kind, lambda q, e, p: {**build(q, e, p), "extra": 1})
    monkeypatch.setitem(dict_table.BUILD, "land", wrong)
    report = bench.run(events=600, quests=20, repeat=1, echo=False)
    assert report.mismatch is not None and report.mismatch.startswith("dict table differs at")
    assert not report.rows
    assert bench.main(["--events", "600", "--quests", "20", "--repeat", "1"]) == 1
