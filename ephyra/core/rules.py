"""The part of the autonomy policy that the lifecycle machine reads.

``ephyra.policy`` parses and validates the policy file a person edits and hands the machine this
plain, already-valid view of it. Keeping it here lets the core stay ignorant of file formats.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from ephyra.core.states import Checkpoint


class CheckpointMode(StrEnum):
    BLOCKING = "blocking"  # waits for a person
    ADVISORY = "advisory"  # a durable automatic decision may advance it; a person still can
    SHADOW = "shadow"  # every decision is recorded; the quest never advances from here


class WatchStart(StrEnum):
    """When the watch window of a landed quest opens."""

    LANDING = "landing"  # seed: landing asks for start_watch (a plain-Git forge deploys on push)
    DEPLOYMENT = "deployment"  # when a deployment containing the landed commit is observed


@dataclass(frozen=True, slots=True)
class CheckpointRule:
    mode: CheckpointMode = CheckpointMode.BLOCKING
    # Confidence thresholds keyed by the exact model identity a backend reported. An identity
    # that is not listed has no threshold, so its decisions never advance the quest.
    thresholds: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))


_DEFAULT_RULE = CheckpointRule()


def _default_checkpoints() -> Mapping[Checkpoint, CheckpointRule]:
    return MappingProxyType({cp: CheckpointRule() for cp in Checkpoint})


@dataclass(frozen=True, slots=True)
class MachinePolicy:
    checkpoints: Mapping[Checkpoint, CheckpointRule] = field(default_factory=_default_checkpoints)
    proof_attempts: int = 3
    # Check names a proof bundle must contain, all passed, for each risk level.
    required_checks: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    mute_hours: int = 24
    watch_minutes: int = 30
    watch_from: WatchStart = WatchStart.LANDING

    def rule(self, checkpoint: Checkpoint) -> CheckpointRule:
        return self.checkpoints.get(checkpoint) or _DEFAULT_RULE


DEFAULT_POLICY = MachinePolicy()
