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


def keyed(trail: str, rev: int, event_id: str, specs: list[tuple[str, dict]]) -> tuple:
    if not specs:
        return ()
    seen: dict[str, int] = {}
    out = []
    for etype, payload in specs:
        n = seen.get(etype, 0)
        seen[etype] = n + 1
        out.append(Effect(f"{trail}:{rev}:{etype}:{event_id}:{n}", etype, payload))
    return tuple(out)
