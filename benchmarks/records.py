"""What both comparison machines return per event: the same shape as ours, so the benchmark
compares like with like."""

from __future__ import annotations

from typing import Any, NamedTuple

CHECKPOINT_OF = {"hypothesised": "A", "planned": "B", "ready": "C"}
AGENT_STATES = frozenset({"researching", "reproducing", "patching"})


class Effect(NamedTuple):
    key: str
    type: str
    payload: dict[str, Any]


class Step(NamedTuple):
    quest_id: str
    event_id: str
    event_type: str
    outcome: str
    state_before: str | None
    state: str | None
    revision: int
    effects: tuple[Effect, ...]
    reason: str | None = None
