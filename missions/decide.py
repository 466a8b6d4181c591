"""A journaled request, decided by the pure machines; and the replay of a mission's journal.

Every commit of a mission journal holds the request it decided (``request.json``, a plain dict:
docs/missions.md lists its fields). ``decide_request`` is the one place that turns such a
request into a call of ``ephyra.core.mission``: the services decide a person's request with it
before journaling, and ``replay_mission`` decides every journaled request again to check that
the journal holds exactly what the machine says.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pygit2

from ephyra.core.mission import (
    Mission,
    MissionDecision,
    SupersedeRequest,
    TransitionRequest,
    add_work_package,
    decide_mission,
    decide_wp,
    new_mission,
    supersede_mission,
    supersede_wp,
)
from missions.journal import MissionJournal, Move, Snapshot

KINDS = ("create", "add_wp", "mission", "wp", "supersede_wp", "supersede_mission", "link")


def machine_evidence(request: dict[str, Any]) -> dict[str, str]:
    """The evidence as the machine takes it: each item's text (what the item is, a link, a
    file's or a proof's digest, is in the item beside it)."""
    return {name: item["text"] for name, item in request.get("evidence", {}).items()}


def decide_request(
    mission: Mission | None, request: dict[str, Any], failed: Mission | None = None
) -> MissionDecision:
    """Decide ``request`` against ``mission`` (None for a creation); ``failed`` is the FAILED
    mission a ``supersede_mission`` request replaces. A ``link`` moves nothing the machine
    knows: it is accepted as it is (the services check it against the quests)."""
    kind, at = request["kind"], datetime.fromisoformat(request["at"])
    if kind == "create":
        return MissionDecision(new_mission(request["new_id"], request["title"], at), True)
    if kind == "supersede_mission":
        if failed is None:
            raise ValueError("a supersede_mission request needs the failed mission")
        return supersede_mission(failed, _supersede(request, at))
    if mission is None:
        raise ValueError(f"a {kind} request needs the mission it acts on")
    if kind == "add_wp":
        return add_work_package(mission, request["new_id"], request["title"], at)
    if kind == "link":
        return MissionDecision(mission, True)
    if kind == "supersede_wp":
        return supersede_wp(mission, request["subject"], _supersede(request, at))
    transition = TransitionRequest(
        to=request["to"],
        actor=request["actor"],
        role=request["role"],
        evidence=machine_evidence(request),
        at=at,
        request_id=request["request_id"],
        expected=request.get("expected"),
        note=request.get("note") or None,
    )
    if kind == "mission":
        return decide_mission(mission, transition)
    if kind == "wp":
        return decide_wp(mission, request["subject"], transition)
    raise ValueError(f"unknown request kind {kind!r}")


def _supersede(request: dict[str, Any], at: datetime) -> SupersedeRequest:
    return SupersedeRequest(
        new_id=request["new_id"],
        title=request["title"],
        actor=request["actor"],
        role=request["role"],
        evidence=machine_evidence(request),
        at=at,
        request_id=request["request_id"],
    )


def move_of(before: Mission | None, after: Mission, request: dict[str, Any]) -> Move:
    """What an accepted request moved, for the commit's trailers."""
    kind, subject = request["kind"], request.get("subject", "")
    if kind in {"create", "supersede_mission"}:
        return Move(kind, after.mission_id, None, str(after.state))
    if kind == "add_wp":
        new = after.work_packages[request["new_id"]]
        return Move(kind, new.wp_id, None, str(new.state))
    if kind == "mission":
        return Move(kind, after.mission_id, str(before.state), str(after.state))  # type: ignore[union-attr]
    old = before.work_packages[subject]  # type: ignore[union-attr]
    return Move(kind, subject, str(old.state), str(after.work_packages[subject].state))


def links_after(links: dict[str, str], request: dict[str, Any]) -> dict[str, str]:
    """The quest links after ``request``: a ``link`` sets its work package's quest."""
    if request["kind"] != "link":
        return links
    return {**links, request["subject"]: request["quest"]}


def replay_mission(journal: MissionJournal, mission_id: str) -> str | None:
    """Decide every journaled request of the mission again, oldest first, and compare: None
    when each commit's ``mission.json`` and ``quests.json`` are what the machine gives for its
    request, else where they first differ, in words."""
    history = list(reversed(journal.history(mission_id)))
    mission: Mission | None = None
    links: dict[str, str] = {}
    for snapshot in history:
        failed = _failed(journal, snapshot)
        decision = decide_request(mission, snapshot.request, failed)
        if not decision.accepted:
            return f"{snapshot.commit}: the machine refuses its request: {decision.reason}"
        if decision.mission != snapshot.mission:
            return f"{snapshot.commit}: mission.json differs from the machine's decision"
        links = links_after(links, snapshot.request)
        if links != snapshot.links:
            return f"{snapshot.commit}: quests.json differs from the links requested"
        mission = decision.mission
    return None


def _failed(journal: MissionJournal, snapshot: Snapshot) -> Mission | None:
    head = snapshot.request.get("failed_head")
    if snapshot.request["kind"] != "supersede_mission" or not head:
        return None
    return journal.at(pygit2.Oid(hex=head)).mission
