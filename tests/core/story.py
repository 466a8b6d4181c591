"""Builds event sequences for tests: ids and times advance by themselves, like a real intake."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ephyra.core.events import BaseEvent, parse_event
from ephyra.core.proof import CheckResult, ProofBundle
from ephyra.core.quest import Quest

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
BASE = "a" * 40
HEAD = "b" * 40


class Story:
    def __init__(self, quest: str = "q1", start: datetime = T0) -> None:
        self.quest = quest
        self.at = start
        self.n = 0

    def __call__(self, type_: str, **fields: Any) -> BaseEvent:
        self.n += 1
        self.at += timedelta(minutes=1)
        data = {"id": f"{self.quest}-e{self.n}", "quest": self.quest, "at": self.at.isoformat()}
        return parse_event({**data, "type": type_, **fields})

    def signal(self, sid: str = "s1", fingerprint: str = "fp1", severity: str = "error", **kw):
        signal = {"id": sid, "fingerprint": fingerprint, "severity": severity, "title": "boom"}
        return self("signal_sensed", signal=signal, **kw)


def bundle_for(quest: Quest, *, checks: tuple[CheckResult, ...] = (), **override) -> dict:
    """A proof_completed payload (bundle + digest) that binds to ``quest`` as it is now."""
    values = {
        "quest": quest.id,
        "revision": quest.revision,
        "risk": quest.risk,
        "base": quest.base,
        "head": quest.patch_head,
        "checks": checks,
    } | override
    bundle = ProofBundle(**values)
    return {"bundle": bundle.model_dump(mode="json"), "digest": bundle.digest()}
