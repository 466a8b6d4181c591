"""Events: everything that can happen to a quest, as pydantic models with a ``type`` tag.

Every event carries its own id, the quest it concerns, the time it happened and who caused it:
the machine reads no clock and invents no identifier. ``docs/lifecycle.md`` documents each type.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

from ephyra.core.actors import normalise_actor
from ephyra.core.proof import ProofBundle, Sha
from ephyra.core.states import Checkpoint, Severity

# No ':' in identifiers, so an effect key splits back into its parts unambiguously.
Ident = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
Text = Annotated[str, Field(max_length=4000)]
Route = Literal["auto_fix", "research_only", "human", "ignore"]
Risk = Literal["low", "medium", "high"]
Verdict = Literal["approve", "revise", "reject"]


def _actor(value: Any) -> Any:
    if not isinstance(value, str):
        return value  # the str check that follows says what is wrong
    name = normalise_actor(value)
    if not name:
        raise ValueError("the actor's name is blank")
    return name


# Normalised before the length is checked, so the limit holds for the name as recorded.
Actor = Annotated[str, BeforeValidator(_actor), Field(min_length=1, max_length=200)]


class SignalRef(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: Ident
    fingerprint: Annotated[str, Field(min_length=1, max_length=200)]
    severity: Severity = Severity.ERROR
    title: Text = ""


class EvidenceCheck(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=100)]
    passed: bool


class ModelEvaluation(BaseModel):
    """A durable automatic decision: which model said it, how sure, and what it checked."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    evaluation: Ident
    model: Annotated[str, Field(min_length=1, max_length=200)]
    confidence: Annotated[float, Field(ge=0.0, le=1.0)]
    checks: tuple[EvidenceCheck, ...] = ()


class BaseEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: Ident
    quest: Ident
    at: AwareDatetime
    actor: Actor = "ephyra"


class SignalSensed(BaseEvent):
    type: Literal["signal_sensed"] = "signal_sensed"
    signal: SignalRef
    parent: Ident | None = None  # set when intake found a conflicting open quest


class TriageDecided(BaseEvent):
    type: Literal["triage_decided"] = "triage_decided"
    route: Route
    risk: Risk = "medium"
    rule: Text = ""


class ResearchStarted(BaseEvent):
    type: Literal["research_started"] = "research_started"
    route: Literal["auto_fix", "research_only"] | None = None


def _bounded_evidence(value: dict[str, Any]) -> dict[str, Any]:
    """Evidence is JSON a page shows and the journal keeps: at most ``EVIDENCE_LIMIT`` bytes.
    The full outputs stay as artifacts, named by their digests."""
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > EVIDENCE_LIMIT:
        raise ValueError(f"the evidence is {size} bytes of JSON; at most {EVIDENCE_LIMIT}")
    return value


EVIDENCE_LIMIT = 64 * 1024
# What a step found, as structured data: the frames it mapped, the commits it suspects or
# tested, the runs it made (each with its output's digest). Shown on the quest page.
Evidence = Annotated[dict[str, Any], AfterValidator(_bounded_evidence)]


class HypothesisWritten(BaseEvent):
    type: Literal["hypothesis_written"] = "hypothesis_written"
    summary: Text
    evidence: Evidence = {}


class CheckpointDecided(BaseEvent):
    type: Literal["checkpoint_decided"] = "checkpoint_decided"
    checkpoint: Checkpoint
    verdict: Verdict
    automatic: ModelEvaluation | None = None
    comment: Text = ""


class ReproductionRecorded(BaseEvent):
    type: Literal["reproduction_recorded"] = "reproduction_recorded"
    probe: Text
    plan: Text = ""
    risk: Risk | None = None
    evidence: Evidence = {}


class ReproductionFailed(BaseEvent):
    type: Literal["reproduction_failed"] = "reproduction_failed"
    reason: Text = ""
    evidence: Evidence = {}


class PatchRecorded(BaseEvent):
    type: Literal["patch_recorded"] = "patch_recorded"
    head: Sha
    base: Sha
    evidence: Evidence = {}


# Why a step or a write could not be done, as one word a person and a filter can read.
Reason = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[a-z0-9_]+$")]
Files = tuple[Annotated[str, Field(min_length=1, max_length=1000)], ...]


class PatchFailed(BaseEvent):
    """No patch could be written (a revert that conflicts and no agent to resolve it, an
    agent whose diff was refused): the quest parks for a person with ``reason``."""

    type: Literal["patch_failed"] = "patch_failed"
    reason: Reason
    detail: Text = ""
    files: Files = ()
    evidence: Evidence = {}


class ProofCompleted(BaseEvent):
    type: Literal["proof_completed"] = "proof_completed"
    bundle: ProofBundle
    digest: Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]


class ProofFailed(BaseEvent):
    """The proof did not pass. ``bundle`` (with its ``digest``) binds the failure to the
    revision, base and head it was made for, so a failure that outlived them is refused; a
    failure without one (from an older producer) is taken as it is. Left out of the JSON when
    absent, so the events journaled before these fields existed read back unchanged."""

    type: Literal["proof_failed"] = "proof_failed"
    reason: Text = ""
    bundle: ProofBundle | None = None
    digest: Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")] | None = None

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name in ("bundle", "digest"):
            if data.get(name) is None:
                data.pop(name, None)
        return data


class ProbesRequested(BaseEvent):
    type: Literal["probes_requested"] = "probes_requested"
    probes: tuple[Annotated[str, Field(min_length=1, max_length=500)], ...] = Field(min_length=1)


class BaseMoved(BaseEvent):
    type: Literal["base_moved"] = "base_moved"
    base: Sha


class Landed(BaseEvent):
    type: Literal["landed"] = "landed"
    commit: Sha


class LandingFailed(BaseEvent):
    """The reviewed commit cannot be landed as the policy allows (it does not fast-forward and
    no other style is allowed, a merge conflicts, the remote refused the push): nothing was
    written, and the quest parks for a person with ``reason``."""

    type: Literal["landing_failed"] = "landing_failed"
    reason: Reason
    detail: Text = ""
    files: Files = ()


class DeploymentObserved(BaseEvent):
    """A deployment of ``commit`` to ``environment`` that contains the quest's landed commit
    ``includes`` (the same commit, or an ancestor of it: the caller checks ancestry in the
    repository; the machine only compares ``includes`` with what it landed)."""

    type: Literal["deployment_observed"] = "deployment_observed"
    commit: Sha
    includes: Sha
    environment: Annotated[str, Field(min_length=1, max_length=200)]


class ForgeCheck(BaseModel):
    """One finished check of a forge's CI: a check run, a commit status or a pipeline."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=200)]
    passed: bool


class ChecksReported(BaseEvent):
    type: Literal["checks_reported"] = "checks_reported"
    head: Sha
    checks: tuple[ForgeCheck, ...] = Field(min_length=1, max_length=100)


class WatchClean(BaseEvent):
    type: Literal["watch_clean"] = "watch_clean"
    summary: Text = ""
    evidence: Evidence = {}  # the watch's figures; the machine does not read them


class RegressionObserved(BaseEvent):
    type: Literal["regression_observed"] = "regression_observed"
    summary: Text = ""
    evidence: Evidence = {}  # the watch's figures; the machine does not read them


class RollbackConfirmed(BaseEvent):
    type: Literal["rollback_confirmed"] = "rollback_confirmed"
    commit: Sha | None = None


class RollbackFailed(BaseEvent):
    """The landed commit cannot be reverted on the base (the revert conflicts with what
    landed since, the remote refused the push): nothing was written, and the quest parks for a
    person with ``reason``."""

    type: Literal["rollback_failed"] = "rollback_failed"
    reason: Reason
    detail: Text = ""
    files: Files = ()


class RegressionReopened(BaseEvent):
    type: Literal["regression_reopened"] = "regression_reopened"
    signal: SignalRef


class SignalMerged(BaseEvent):
    type: Literal["signal_merged"] = "signal_merged"
    signal: SignalRef
    # How many sightings of the fingerprint this event stands for: intake folds the repeats of
    # one export and one time window into one event, naming one of them in ``signal``.
    count: Annotated[int, Field(ge=1)] = 1


class Paused(BaseEvent):
    type: Literal["paused"] = "paused"
    reason: Text = ""


class Resumed(BaseEvent):
    type: Literal["resumed"] = "resumed"


class Claimed(BaseEvent):
    type: Literal["claimed"] = "claimed"


class Released(BaseEvent):
    type: Literal["released"] = "released"


class Killed(BaseEvent):
    type: Literal["killed"] = "killed"
    reason: Text = ""


class CommentAdded(BaseEvent):
    type: Literal["comment_added"] = "comment_added"
    body: Text
    reply_requested: bool = False


class HumanRevision(BaseEvent):
    type: Literal["human_revision"] = "human_revision"
    head: Sha


class ChildAttached(BaseEvent):
    type: Literal["child_attached"] = "child_attached"
    child: Ident
    signal: SignalRef


class ParentLanded(BaseEvent):
    type: Literal["parent_landed"] = "parent_landed"
    parent: Ident


class SpendRequested(BaseEvent):
    type: Literal["spend_requested"] = "spend_requested"
    request: Ident
    amount_micros: int = Field(gt=0)
    purpose: Text


class SpendDecided(BaseEvent):
    type: Literal["spend_decided"] = "spend_decided"
    request: Ident
    approved: bool


class UsageRecorded(BaseEvent):
    type: Literal["usage_recorded"] = "usage_recorded"
    source: Annotated[str, Field(min_length=1, max_length=200)]
    cost_micros: int = Field(default=0, ge=0)
    tokens: int = Field(default=0, ge=0)
    runner_seconds: int = Field(default=0, ge=0)


Event = Annotated[
    SignalSensed
    | TriageDecided
    | ResearchStarted
    | HypothesisWritten
    | CheckpointDecided
    | ReproductionRecorded
    | ReproductionFailed
    | PatchRecorded
    | PatchFailed
    | ProofCompleted
    | ProofFailed
    | ProbesRequested
    | BaseMoved
    | Landed
    | LandingFailed
    | DeploymentObserved
    | ChecksReported
    | WatchClean
    | RegressionObserved
    | RollbackConfirmed
    | RollbackFailed
    | RegressionReopened
    | SignalMerged
    | Paused
    | Resumed
    | Claimed
    | Released
    | Killed
    | CommentAdded
    | HumanRevision
    | ChildAttached
    | ParentLanded
    | SpendRequested
    | SpendDecided
    | UsageRecorded,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(Event)
EVENT_TYPES: dict[str, type[BaseEvent]] = {
    cls.model_fields["type"].default: cls for cls in BaseEvent.__subclasses__()
}


def parse_event(data: dict[str, Any] | str | bytes) -> BaseEvent:
    """Validate one event from a mapping or JSON text; raises pydantic.ValidationError."""
    if isinstance(data, str | bytes):
        return EVENT_ADAPTER.validate_json(data)
    return EVENT_ADAPTER.validate_python(data)


def event_to_dict(event: BaseEvent) -> dict[str, Any]:
    return event.model_dump(mode="json")
