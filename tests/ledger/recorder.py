"""An in-process stand-in for the outside world, for the ledger's unit tests: it records every
request under its idempotency key and can be told to fail. The process-level harness uses
tests/ledger/world.py instead, which keeps its record in a file that survives SIGKILL."""

from __future__ import annotations

from ephyra.core.ports import ClaimLost, EffectFailed, EffectRequest, EffectResult, retry_safe

REQUESTS: list[EffectRequest] = []
BEHAVIOUR: dict[str, str] = {}  # effect type -> "ok" | "raise" | "refuse"
CHECK: dict[str, str] = {}  # effect type -> "landed" | "absent" | "unknown"


def reset() -> None:
    REQUESTS.clear()
    BEHAVIOUR.clear()
    CHECK.clear()


class Recorder:
    def run(self, request: EffectRequest) -> EffectResult:
        if not retry_safe(request.type) and not request.still_holder():
            raise ClaimLost(request.key)  # as a write adapter must: ask last, then send
        REQUESTS.append(request)
        behaviour = BEHAVIOUR.get(request.type, "ok")
        if behaviour == "raise":
            raise TimeoutError("no answer from the outside world")
        if behaviour == "refuse":
            raise EffectFailed("the outside world said no")
        return EffectResult("succeeded", {"attempt": request.attempt})

    def check(self, request: EffectRequest) -> EffectResult | None:
        answer = CHECK.get(request.type, "unknown")
        if answer == "landed":
            return EffectResult("succeeded", {"checked": True})
        if answer == "absent":
            return EffectResult("absent", {"checked": True})
        return None
