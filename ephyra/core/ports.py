"""Ports: what the engine needs from the outside world, as protocols.

The ledger delivers each effect to the adapter registered for its type. An adapter is told the
effect's ledger key and must use it as its idempotency key, so that the outside world can
recognise a request it has seen. Adapters live outside the core; ``ephyra/compose.py`` picks them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, Protocol

from ephyra.core.effects import WRITE_EFFECTS, EffectType
from ephyra.core.events import BaseEvent


class EffectRequest(NamedTuple):
    key: str  # the ledger key; the adapter's idempotency key
    type: EffectType
    workspace: str  # the workspace's slug
    quest_id: str
    payload: dict[str, Any]
    attempt: int  # 1 for the first delivery
    # The worker's lease generation: a fencing token for services that can check one.
    generation: int = 0
    # Asks the ledger, right before a write's request leaves, whether this worker still holds
    # the claim. A worker frozen after its claim may wake when another has taken over; a write
    # adapter calls this last, so the window for a stale write is the send itself.
    still_holder: Callable[[], bool] = lambda: True


class EffectResult(NamedTuple):
    """What came of an effect. ``events`` go back to the engine, in order; their ids must be
    derived from the request's key (``outcome_event_id``) so that feeding them again after a
    crash is a redelivery. A ``check`` may also answer ``absent``: the write certainly did not
    happen, so delivering it again is safe."""

    status: Literal["succeeded", "failed", "absent"]
    detail: dict[str, Any] = {}
    events: tuple[BaseEvent, ...] = ()


class EffectFailed(Exception):
    """The adapter knows the effect did not happen (refused before anything was sent, say).
    Any other exception from a write leaves its outcome unknown: ambiguous."""


class ClaimLost(Exception):
    """Raised by an adapter whose ``still_holder()`` said no: nothing was sent."""


class EffectAdapter(Protocol):
    def run(self, request: EffectRequest) -> EffectResult:
        """Do the effect. Raise ``EffectFailed`` when it certainly did not happen."""
        ...

    def check(self, request: EffectRequest) -> EffectResult | None:
        """For an ambiguous write: look whether it landed (did this commit land? does this
        branch exist?). ``None`` when the adapter cannot tell; a person decides then."""
        ...


def retry_safe(effect_type: EffectType) -> bool:
    """Reads and computations may run again; writes never run again without a check."""
    return effect_type not in WRITE_EFFECTS


def outcome_event_id(key: str, index: int) -> str:
    """Events an outcome feeds back are named by the operation, so a second feeding after a
    crash is a redelivery the journal recognises, not a new event."""
    return f"fx-{hashlib.sha256(key.encode()).hexdigest()[:24]}-{index}"
