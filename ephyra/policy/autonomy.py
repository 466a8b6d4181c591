"""Parse and validate the autonomy policy (YAML), reporting errors by field and line.

The policy is what an admin edits: per-checkpoint modes and model thresholds, proof attempts
and the proof matrix, triage rules and watch boundaries. ``AutonomyPolicy.machine()`` hands the
lifecycle machine the plain view it needs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ephyra.core.rules import CheckpointMode, CheckpointRule, MachinePolicy, WatchStart
from ephyra.core.states import Checkpoint, Severity
from ephyra.policy.landing import LandingPolicy
from ephyra.policy.work import AgentPolicy, WorkPolicy

DEFAULT_POLICY_PATH = Path(__file__).with_name("default.yaml")

Risk = Literal["low", "medium", "high"]
CheckName = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[a-z0-9_.-]+$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckpointPolicy(_Strict):
    mode: CheckpointMode = CheckpointMode.BLOCKING
    # Keyed by the exact identity a backend returned, e.g. "judgement-jev/jev-1.14".
    thresholds: dict[Annotated[str, Field(min_length=1)], Annotated[float, Field(ge=0, le=1)]] = {}

    @model_validator(mode="after")
    def _advisory_needs_a_threshold(self) -> CheckpointPolicy:
        if self.mode is CheckpointMode.ADVISORY and not self.thresholds:
            raise ValueError("an advisory checkpoint needs at least one model threshold")
        return self


# The checks every workspace has (``work.proof``); any other name in the matrix is a command
# of ``work.checks``.
BUILTIN_CHECKS = ("tests", "probe", "lint")


class ProofPolicy(_Strict):
    attempts: int = Field(default=3, ge=1, le=20)
    matrix: dict[Risk, list[CheckName]] = {"low": [], "medium": [], "high": []}
    # A check that fails and then passes when run once more is ``flaky``: failed, unless this.
    allow_flaky: bool = False


class Match(_Strict):
    severity_at_least: Severity | None = None
    severity_at_most: Severity | None = None
    paths: list[Annotated[str, Field(min_length=1)]] = []
    fingerprints: list[Annotated[str, Field(min_length=1)]] = []
    exception_types: list[Annotated[str, Field(min_length=1)]] = []


class Route(_Strict):
    route: Literal["auto_fix", "research_only", "human", "ignore"]
    risk: Risk = "medium"


class TriageRule(Route):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    when: Match = Match()


class TriagePolicy(_Strict):
    default: Route = Route(route="human")
    mute_hours: int = Field(default=24, ge=1, le=24 * 90)
    rules: list[TriageRule] = []


class WatchPolicy(_Strict):
    # landing: the window opens when the quest lands; deployment: when a forge reports a
    # production deployment that carries the landed commit (docs/lifecycle.md).
    starts: WatchStart = WatchStart.LANDING
    minutes: int = Field(default=30, ge=1, le=7 * 24 * 60)
    min_events: int = Field(default=20, ge=0)
    max_error_rate_ratio: float = Field(default=1.5, ge=1.0)
    max_new_fingerprints: int = Field(default=0, ge=0)


class AutonomyPolicy(_Strict):
    version: Literal[1] = 1
    checkpoints: dict[Checkpoint, CheckpointPolicy] = {cp: CheckpointPolicy() for cp in Checkpoint}
    proof: ProofPolicy = ProofPolicy()
    triage: TriagePolicy = TriagePolicy()
    watch: WatchPolicy = WatchPolicy()
    landing: LandingPolicy = LandingPolicy()
    work: WorkPolicy = WorkPolicy()
    agent: AgentPolicy | None = None

    @field_validator("checkpoints")
    @classmethod
    def _every_checkpoint_named(cls, value: dict) -> dict:
        missing = [str(cp) for cp in Checkpoint if cp not in value]
        if missing:
            raise ValueError(f"checkpoints {', '.join(missing)} must be configured")
        return value

    def machine(self) -> MachinePolicy:
        return MachinePolicy(
            checkpoints=MappingProxyType(
                {
                    cp: CheckpointRule(rule.mode, MappingProxyType(dict(rule.thresholds)))
                    for cp, rule in self.checkpoints.items()
                }
            ),
            proof_attempts=self.proof.attempts,
            required_checks=MappingProxyType(
                {risk: tuple(names) for risk, names in self.proof.matrix.items()}
            ),
            mute_hours=self.triage.mute_hours,
            watch_minutes=self.watch.minutes,
            watch_from=self.watch.starts,
        )


class PolicyError(ValueError):
    """A policy that cannot be used; ``problems`` lists (field path, line, message)."""

    def __init__(self, source: str, problems: list[tuple[str, int | None, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = [
            f"{source}:{line if line is not None else '?'}: {path or '(top)'}: {message}"
            for path, line, message in problems
        ]
        super().__init__("invalid policy\n" + "\n".join(lines))


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Follow a pydantic error location through the YAML node tree to a 1-based line.

    A mapping entry reports the line of its key, where a person looks for the field."""
    line = None if node is None else node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            entry = next(((k, v) for k, v in node.value if str(k.value) == str(part)), None)
            if entry is None:
                return line
            line, node = entry[0].start_mark.line + 1, entry[1]
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value)
        ):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def parse_policy(text: str, source: str = "<policy>") -> AutonomyPolicy:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise PolicyError(source, [("", line, f"not valid YAML: {problem}")]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(source, [("", 1, "the policy must be a mapping of sections")])
    try:
        policy = AutonomyPolicy.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = tuple(p for p in error["loc"] if not str(p).startswith("function-after"))
            path = ".".join(str(p) for p in loc)
            problems.append((path, _line_of(node, loc), error["msg"]))
        raise PolicyError(source, problems) from None
    problems = [
        (".".join(str(p) for p in loc), _line_of(node, loc), message)
        for loc, message in unknown_checks(policy)
    ]
    if problems:
        raise PolicyError(source, problems)
    return policy


def unknown_checks(policy: AutonomyPolicy) -> list[tuple[tuple[Any, ...], str]]:
    """The proof matrix's names that no check answers to: neither a built-in check nor a
    command of ``work.checks``; each with its place in the policy, so the error can name its
    line. (``lint`` without a ``work.lint`` command is allowed here and fails the proof that
    needs it, saying so: policies written before proof ran checks name it that way.)"""
    found = []
    for risk, names in policy.proof.matrix.items():
        for index, name in enumerate(names):
            loc = ("proof", "matrix", risk, index)
            if name not in BUILTIN_CHECKS and name not in policy.work.checks:
                known = ", ".join([*BUILTIN_CHECKS, *sorted(policy.work.checks)])
                found.append(
                    (loc, f"no check {name!r}: name one of {known}, or add it to work.checks")
                )
    return found


def load_policy(path: str | Path) -> AutonomyPolicy:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(str(path), [("", None, f"cannot read: {exc.strerror}")]) from None
    return parse_policy(text, str(path))


def policy_digest(text: str) -> str:
    """The version of a policy text: what the journal and the audit log record."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def default_policy() -> AutonomyPolicy:
    return load_policy(DEFAULT_POLICY_PATH)
