"""The quest: an immutable value the machine replaces on every accepted event."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from ephyra.core.states import Severity, State


class CheckpointRecord(NamedTuple):
    """A decision taken at a checkpoint, kept even when it did not move the quest."""

    checkpoint: str
    verdict: str
    actor: str
    event: str
    advanced: bool
    model: str | None = None
    confidence: float | None = None
    note: str = ""


class Usage(NamedTuple):
    receipts: int = 0
    cost_micros: int = 0
    tokens: int = 0
    runner_seconds: int = 0


class Quest(NamedTuple):
    """A named tuple rather than a dataclass: the machine makes one per event, and a tuple is a
    third of the memory of an instance dictionary and copies in one step."""

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
    # The deployment that carried the landed commit out (deployment_observed).
    deployed_commit: str | None = None
    deployed_to: str | None = None
    deployed_at: datetime | None = None
    proof_attempts: int = 0
    proof_digest: str | None = None
    proof_pending: bool = False  # proof running for a human revision while a review is held
    approval_c: str | None = None  # the proof digest a C approval was given for
    # The forge's CI on ``checks_head``: the names of the checks that failed there last.
    checks_head: str | None = None
    failing_checks: tuple[str, ...] = ()
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
        """A copy with ``changes`` applied; an unknown field name is a KeyError."""
        values = list(self)
        for name, value in changes.items():
            values[_INDEX[name]] = value
        return _tuple_new(Quest, values)

    def advance(self, changes: dict[str, Any], at: datetime, event: str) -> Quest:
        """``evolve`` plus the event's time and id: the machine's per-event step."""
        values = list(self)
        for name, value in changes.items():
            values[_INDEX[name]] = value
        values[_UPDATED_AT] = at
        values[_LAST_EVENT] = event
        return _tuple_new(Quest, values)

    def to_dict(self) -> dict[str, Any]:
        return {name: _jsonable(value) for name, value in zip(self._fields, self, strict=True)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Quest:
        values = dict(data)
        for name in ("state", "resume_state"):
            if values.get(name) is not None:
                values[name] = State(values[name])
        for name in ("severity", "severity_floor"):
            values[name] = Severity(values[name])
        for name in ("created_at", "updated_at", "muted_until", "deployed_at"):
            if values.get(name) is not None:
                values[name] = datetime.fromisoformat(values[name])
        values["decisions"] = tuple(CheckpointRecord(**d) for d in values.get("decisions", ()))
        values["children"] = tuple(values.get("children", ()))
        values["failing_checks"] = tuple(values.get("failing_checks", ()))
        values["usage"] = Usage(**values.get("usage", {}))
        return cls(**values)


_INDEX = {name: i for i, name in enumerate(Quest._fields)}
_UPDATED_AT, _LAST_EVENT = _INDEX["updated_at"], _INDEX["last_event"]
_tuple_new = tuple.__new__


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, CheckpointRecord | Usage):
        return value._asdict()
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value
