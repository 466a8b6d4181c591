"""What a person may do next on a mission, asked of the machine, never guessed by a template.

For each transition of the machine's tables that leaves the current state, and each role the
person holds that the rule names, the machine decides the move with the evidence standing in
(``"probe"``): what it accepts is offered, what it refuses is not (a maker is not offered to
pass their own work package, a lead is not offered to cancel, nothing is offered from a final
state). The evidence the form then asks for is the rule's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ephyra.core.mission import (
    MISSION_TRANSITIONS,
    SUPERSEDE_EVIDENCE,
    SUPERSEDE_ROLES,
    WP_TRANSITIONS,
    Mission,
    Role,
    SupersedeRequest,
    TransitionRequest,
    decide_mission,
    decide_wp,
    supersede_mission,
    supersede_wp,
)

MOVE, SUPERSEDE = "move", "supersede"


@dataclass(frozen=True)
class Offer:
    """A move the machine accepts from this person now, in any of ``roles``."""

    kind: str  # move, or supersede
    subject: str  # the mission's or the work package's id
    to: str  # the target state ("" for a supersede)
    roles: tuple[str, ...]
    evidence: str  # the evidence name the transition requires
    description: str
    recovery: bool  # written to the attempt ledger

    @property
    def target(self) -> str:
        """The target state as people read it: ``IN PROGRESS``."""
        return self.to.replace("_", " ").upper()

    @property
    def label(self) -> str:
        if self.kind == SUPERSEDE:
            return "Supersede with a new one"
        return f"→ {self.target}"


def _probe(to: str, actor: str, role: Role, evidence: str, mission: Mission) -> TransitionRequest:
    return TransitionRequest(
        to=to,
        actor=actor,
        role=role,
        evidence={evidence: "probe"},
        at=mission.updated_at,
        request_id="offer",
    )


def mission_offers(mission: Mission, held: frozenset[Role], actor: str) -> list[Offer]:
    """The mission's moves this person may make now, in the table's order."""
    offers = []
    for (source, target), rule in MISSION_TRANSITIONS.items():
        if source is not mission.state:
            continue
        roles = tuple(
            str(role)
            for role in sorted(rule.roles & held)
            if decide_mission(mission, _probe(target, actor, role, rule.evidence, mission)).accepted
        )
        if roles:
            offers.append(
                Offer(MOVE, mission.mission_id, str(target), roles, rule.evidence,
                      rule.description, rule.recovery)
            )  # fmt: skip
    return offers


def wp_offers(mission: Mission, wp_id: str, held: frozenset[Role], actor: str) -> list[Offer]:
    """The moves of work package ``wp_id`` this person may make now, then its supersede."""
    wp = mission.work_packages[wp_id]
    offers = []
    for (source, target), rule in WP_TRANSITIONS.items():
        if source is not wp.state:
            continue
        roles = tuple(
            str(role)
            for role in sorted(rule.roles & held)
            if decide_wp(
                mission, wp_id, _probe(target, actor, role, rule.evidence, mission)
            ).accepted
        )
        if roles:
            offers.append(
                Offer(MOVE, wp_id, str(target), roles, rule.evidence, rule.description,
                      rule.recovery)
            )  # fmt: skip
    roles = tuple(
        str(role)
        for role in sorted(SUPERSEDE_ROLES & held)
        if supersede_wp(mission, wp_id, _replace(actor, role, mission, "wp-offer")).accepted
    )
    if roles:
        offers.append(
            Offer(SUPERSEDE, wp_id, "", roles, SUPERSEDE_EVIDENCE,
                  "replace the failed work package by a new one, linked", True)
        )  # fmt: skip
    return offers


def mission_supersede_offer(
    mission: Mission, held: frozenset[Role], actor: str, *, superseded: bool
) -> Offer | None:
    """Superseding the mission, when it FAILED, no mission supersedes it yet, and the person
    is its lead, human or higher."""
    if superseded:
        return None
    roles = tuple(
        str(role)
        for role in sorted(SUPERSEDE_ROLES & held)
        if supersede_mission(mission, _replace(actor, role, mission, "m-offer")).accepted
    )
    if not roles:
        return None
    return Offer(SUPERSEDE, mission.mission_id, "", roles, SUPERSEDE_EVIDENCE,
                 "a new mission replaces the failed one, linked", True)  # fmt: skip


def _replace(actor: str, role: Role, mission: Mission, new_id: str) -> SupersedeRequest:
    return SupersedeRequest(
        new_id=new_id,
        title="probe",
        actor=actor,
        role=role,
        evidence={SUPERSEDE_EVIDENCE: "probe"},
        at=mission.updated_at,
        request_id="offer",
    )
