"""Effects: what a transition asks the outside world to do, each under a stable key.

An effect is a request, not evidence that anything happened; its outcome comes back later as an
event. The key ``trail:rev:type:event:occurrence`` names the operation so that the ledger can
deliver it once: ``trail`` is the quest id, ``rev`` the quest's revision after the transition,
``type`` the effect type, ``event`` the id of the event that caused it and ``occurrence`` the
0-based count of earlier effects of the same type in the same transition. The payload is not
part of the key, so a replay that rebuilds a payload differently still finds the same key.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NamedTuple


class EffectType(StrEnum):
    RUN_TRIAGE = "run_triage"
    START_AGENT = "start_agent"
    STOP_AGENT = "stop_agent"
    RUN_PROOF = "run_proof"
    RUN_PROBES = "run_probes"
    REQUEST_CHECKPOINT = "request_checkpoint"
    REQUEST_SPEND = "request_spend"
    START_RESPONDENT_RUN = "start_respondent_run"
    LAND = "land"
    REBASE = "rebase"
    ROLLBACK = "rollback"
    START_WATCH = "start_watch"
    REGISTER_REGRESSION_PROBE = "register_regression_probe"
    NOTIFY_INBOX = "notify_inbox"
    REPLY_COMMENT = "reply_comment"
    MERGE_SIGNAL = "merge_signal"
    MUTE_FINGERPRINT = "mute_fingerprint"
    RESUME_DEPENDENTS = "resume_dependents"
    DELIVER_CHILD_EVIDENCE = "deliver_child_evidence"


# Writes change something outside Ephyra that cannot be safely repeated without checking first;
# the ledger never retries one blindly (seed: an ambiguous write stops for reconciliation).
WRITE_EFFECTS = frozenset(
    {
        EffectType.LAND,
        EffectType.REBASE,
        EffectType.ROLLBACK,
        EffectType.REQUEST_SPEND,
        EffectType.START_RESPONDENT_RUN,
        EffectType.REPLY_COMMENT,
    }
)


# Effects that pass on a fact which stays true once its transition happened (a parent landed,
# a child exists, a fingerprint is muted, a signal was merged, a probe guards a fix). The ledger
# delivers them even after their quest moved on: a parent that closed before its children heard
# of it still releases them. Every other effect is a request of the state that asked for it and
# is superseded when the quest leaves that state.
STANDING_EFFECTS = frozenset(
    {
        EffectType.RESUME_DEPENDENTS,
        EffectType.DELIVER_CHILD_EVIDENCE,
        EffectType.MUTE_FINGERPRINT,
        EffectType.MERGE_SIGNAL,
        EffectType.REGISTER_REGRESSION_PROBE,
    }
)


class Effect(NamedTuple):
    key: str
    type: EffectType
    payload: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "type": str(self.type), "payload": self.payload}


class EffectKey(NamedTuple):
    trail: str
    revision: int
    type: EffectType
    event: str
    occurrence: int

    def __str__(self) -> str:
        return f"{self.trail}:{self.revision}:{self.type}:{self.event}:{self.occurrence}"


def effect_key(trail: str, revision: int, type_: str, event: str, occurrence: int) -> str:
    return f"{trail}:{revision}:{type_}:{event}:{occurrence}"


def parse_effect_key(key: str) -> EffectKey:
    """Split a key back into its parts; identifiers never contain ':' so this is unambiguous."""
    parts = key.split(":")
    if len(parts) != 5:
        raise ValueError(f"an effect key has five ':'-separated parts, got {key!r}")
    trail, revision, type_, event, occurrence = parts
    try:
        return EffectKey(trail, int(revision), EffectType(type_), event, int(occurrence))
    except ValueError as exc:
        raise ValueError(f"malformed effect key {key!r}: {exc}") from None
