"""Triage rules: which route a new signal takes. Pure: the engine gathers the facts."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from ephyra.core.states import Severity
from ephyra.policy.autonomy import AutonomyPolicy, Match


@dataclass(frozen=True, slots=True)
class SignalFacts:
    fingerprint: str
    severity: Severity
    exception_type: str = ""
    paths: tuple[str, ...] = ()  # repository paths of the in-app stack frames


@dataclass(frozen=True, slots=True)
class TriageResult:
    route: str
    risk: str
    rule: str  # the rule's name, or "default"


def _matches(when: Match, facts: SignalFacts) -> bool:
    rank = facts.severity.rank
    if when.severity_at_least is not None and rank < when.severity_at_least.rank:
        return False
    if when.severity_at_most is not None and rank > when.severity_at_most.rank:
        return False
    if when.fingerprints and facts.fingerprint not in when.fingerprints:
        return False
    if when.exception_types and facts.exception_type not in when.exception_types:
        return False
    return not when.paths or any(
        fnmatchcase(path, pattern) for path in facts.paths for pattern in when.paths
    )


def triage(facts: SignalFacts, policy: AutonomyPolicy) -> TriageResult:
    """The first rule whose conditions all hold decides; otherwise the policy's default."""
    for rule in policy.triage.rules:
        if _matches(rule.when, facts):
            return TriageResult(rule.route, rule.risk, rule.name)
    default = policy.triage.default
    return TriageResult(default.route, default.risk, "default")
