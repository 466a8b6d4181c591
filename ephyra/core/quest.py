"""The quest: an immutable value the machine replaces on every accepted event."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from ephyra.core.states import Severity, State

_new = object.__new__
_set = object.__setattr__


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """A decision taken at a checkpoint, kept even when it did not move the quest."""

    checkpoint: str
    verdict: str
    actor: str
    event: str
    advanced: bool
    model: str | None = None
    confidence: float | None = None
    note: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    receipts: int = 0
    cost_micros: int = 0
    tokens: int = 0
    runner_seconds: int = 0


@dataclass(frozen=True)
class Quest:
    id: str
    state: State
    fingerprint: str
    severity: Severity
    severity_floor: Severity
    created_at: datetime
    updated_at: datetime
    revision: int = 1
    route: str | None = None
    risk: str | None = None
    title: str = ""
    signal_count: int = 1
    last_signal: str | None = None
    resume_state: State | None = None
    park_reason: str | None = None
    claim: str | None = None
    base: str | None = None
    patch_head: str | None = None
    landed_commit: str | None = None
    proof_attempts: int = 0
    proof_digest: str | None = None
    proof_pending: bool = False  # proof running for a human revision while a review is held
    approval_c: str | None = None  # the proof digest a C approval was given for
    hypothesis: str = ""
    probe: str = ""
    plan: str = ""
    decisions: tuple[CheckpointRecord, ...] = ()
    parent: str | None = None
    children: tuple[str, ...] = ()
    muted_until: datetime | None = None
    pending_spend: str | None = None
    comments: int = 0
    usage: Usage = Usage()
    last_event: str | None = None

    def evolve(self, changes: dict[str, Any]) -> Quest:
        """A copy with ``changes`` applied. Skips ``__init__``: the hot path."""
        new = _new(Quest)
        _set(new, "__dict__", {**self.__dict__, **changes})
        return new

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            out[f.name] = _jsonable(getattr(self, f.name))
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Quest:
        values = dict(data)
        for name in ("state", "resume_state"):
            if values.get(name) is not None:
                values[name] = State(values[name])
        for name in ("severity", "severity_floor"):
            values[name] = Severity(values[name])
        for name in ("created_at", "updated_at", "muted_until"):
            if values.get(name) is not None:
                values[name] = datetime.fromisoformat(values[name])
        values["decisions"] = tuple(CheckpointRecord(**d) for d in values.get("decisions", ()))
        values["children"] = tuple(values.get("children", ()))
        values["usage"] = Usage(**values.get("usage", {}))
        return cls(**values)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, CheckpointRecord | Usage):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value
