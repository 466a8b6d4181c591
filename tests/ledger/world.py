"""The outside world, as a faithful fake of services that take idempotency keys.

Worker processes started by the fault harness (tests/ledger/harness.py) deliver the agent,
proof, landing and watch effects here. Everything the world sees and does is appended to a JSON
lines file named by ``EPHYRA_WORLD_FILE`` (one ``write`` per line on an ``O_APPEND`` descriptor,
so a line is whole or absent and a SIGKILL loses nothing the world already did), with the pid of
the process that asked; the harness reads it afterwards to prove that nothing happened twice.

The world behaves like the real services behind each effect type:

* reads and computations (agent steps, proofs, watches) deduplicate by key, as an idempotent API
  does: a repeated request is answered with the first answer and executes nothing again;
* writes (``land``) do **not** deduplicate, so a blind retry of a write shows up as a second
  execution; ``check`` looks the key up (found: the first answer again; not found: absent);
* as a write adapter must, it asks ``request.still_holder()`` last, right before a write is
  sent, and sends nothing (``ClaimLost``, recorded as ``withheld``) when the claim was lost.

``EPHYRA_WORLD_GATE="<type>:<before|after>:<path>"`` makes this process wait until ``path``
exists, before a request of that type leaves (``before``) or after the world executed it and
before the answer comes back (``after``): the two-worker tests hold a worker there.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ephyra.core.effects import EffectType
from ephyra.core.events import event_to_dict, parse_event
from ephyra.core.ports import (
    ClaimLost,
    EffectRequest,
    EffectResult,
    outcome_event_id,
    retry_safe,
)

FILE_VARIABLE = "EPHYRA_WORLD_FILE"
GATE_VARIABLE = "EPHYRA_WORLD_GATE"
ACTOR = "world:agent"
# Every check a proof asks for, whatever the risk: the default policy needs tests and a probe.
CHECKS = ("tests", "probe")


def world_path() -> Path:
    path = os.environ.get(FILE_VARIABLE)
    if not path:
        raise RuntimeError(f"{FILE_VARIABLE} must name the world's record file")
    return Path(path)


def record(entry: dict[str, Any], path: Path | None = None) -> None:
    """Append one line in one ``write``: O_APPEND makes concurrent lines interleave whole."""
    line = (json.dumps({**entry, "pid": os.getpid()}, sort_keys=True) + "\n").encode()
    fd = os.open(path or world_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _first_execution(key: str, path: Path | None = None) -> dict[str, Any] | None:
    for entry in read(path or world_path()):
        if entry["kind"] == "execution" and entry["key"] == key:
            return entry["answer"]
    return None


def _sha(*parts: str) -> str:
    return hashlib.sha1(":".join(parts).encode()).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _events(request: EffectRequest, *bodies: dict[str, Any]) -> list[dict[str, Any]]:
    """Outcome events named by the request's key, so feeding them twice is a redelivery."""
    at = _now()
    return [
        event_to_dict(
            parse_event(
                {
                    "id": outcome_event_id(request.key, index),
                    "quest": request.quest_id,
                    "at": at,
                    "actor": ACTOR,
                    **body,
                }
            )
        )
        for index, body in enumerate(bodies)
    ]


def _agent(request: EffectRequest) -> list[dict[str, Any]]:
    step = request.payload.get("step")
    if step == "research":
        return _events(
            request,
            {"type": "research_started"},
            {"type": "hypothesis_written", "summary": "the cache key ignores the locale"},
        )
    if step == "reproduce":
        return _events(
            request,
            {"type": "reproduction_recorded", "probe": "test_locale_cache", "plan": "key by it"},
        )
    if step == "patch":
        head, base = _sha("head", request.key), _sha("base", request.quest_id)
        return _events(request, {"type": "patch_recorded", "head": head, "base": base})
    raise ValueError(f"the agent knows no step {step!r}")


def _proof(request: EffectRequest) -> list[dict[str, Any]]:
    """A passing proof bound to the quest as the projection shows it now."""
    from ephyra.core.proof import CheckResult
    from ephyra.core.quest import Quest as QuestValue
    from quests.models import Quest
    from tests.core.story import bundle_for

    row = Quest.objects.get(workspace__slug=request.workspace, quest_id=request.quest_id)
    checks = tuple(CheckResult(name=name, passed=True) for name in CHECKS)
    bundle = bundle_for(QuestValue.from_dict(row.data), checks=checks)
    return _events(request, {"type": "proof_completed", **bundle})


def _answer(request: EffectRequest) -> dict[str, Any]:
    kind = request.type
    if kind == EffectType.START_AGENT:
        events = _agent(request)
    elif kind == EffectType.RUN_PROOF:
        events = _proof(request)
    elif kind == EffectType.LAND:
        events = _events(request, {"type": "landed", "commit": _sha("landed", request.key)})
    elif kind == EffectType.START_WATCH:
        events = _events(request, {"type": "watch_clean", "summary": "quiet for 30 minutes"})
    else:  # request_checkpoint (a person answers), stop_agent, probes: done, nothing to report
        events = []
    return {"status": "succeeded", "detail": {"by": os.getpid()}, "events": events}


def _result(answer: dict[str, Any]) -> EffectResult:
    events = tuple(parse_event(event) for event in answer["events"])
    return EffectResult(answer["status"], answer["detail"], events)


class World:
    """The effect adapter the harness's workers use for every effect type it routes here. The
    harness itself checks writes with ``World(path)`` when it reconciles as a person."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or world_path()

    def run(self, request: EffectRequest) -> EffectResult:
        kind = str(request.type)
        self._gate(kind, "before", request)
        if not retry_safe(request.type) and not request.still_holder():
            # As a write adapter must: ask the ledger last, and send nothing for a lost claim.
            self._record("withheld", request, generation=request.generation)
            raise ClaimLost(request.key)
        self._record("request", request, attempt=request.attempt)
        if retry_safe(request.type):
            first = _first_execution(request.key, self.path)
            if first is not None:
                return _result(first)  # an idempotent API answers a repeat from its record
        answer = _answer(request)
        self._record("execution", request, answer=answer)
        self._gate(kind, "after", request)
        return _result(answer)

    def check(self, request: EffectRequest) -> EffectResult | None:
        first = _first_execution(request.key, self.path)
        self._record("check", request, found=first is not None)
        if first is None:
            return EffectResult("absent", {"checked": True})
        return _result(first)

    def _record(self, kind: str, request: EffectRequest, **fields: Any) -> None:
        record({"kind": kind, "key": request.key, "type": str(request.type), **fields}, self.path)

    def _gate(self, kind: str, moment: str, request: EffectRequest) -> None:
        spec = os.environ.get(GATE_VARIABLE, "")
        if not spec.startswith(f"{kind}:{moment}:"):
            return
        path = spec.split(":", 2)[2]
        self._record("gate", request, moment=moment)
        while not os.path.exists(path):
            time.sleep(0.01)


class NoopAdapter:
    """An effect that does nothing, for benchmarks/effects.py: what the ledger itself costs."""

    def run(self, request: EffectRequest) -> EffectResult:
        return EffectResult("succeeded")

    def check(self, request: EffectRequest) -> EffectResult | None:
        return EffectResult("absent")


# What the harness routes to the world: every effect type the main line asks for outside Ephyra.
ROUTED = (
    EffectType.START_AGENT,
    EffectType.STOP_AGENT,
    EffectType.REQUEST_CHECKPOINT,
    EffectType.RUN_PROOF,
    EffectType.RUN_PROBES,
    EffectType.LAND,
    EffectType.START_WATCH,
    EffectType.REGISTER_REGRESSION_PROBE,
)


def adapters_setting() -> str:
    """The ``EPHYRA_EFFECT_ADAPTERS`` value that routes those types here."""
    return ",".join(f"{kind}=tests.ledger.world.World" for kind in ROUTED)
