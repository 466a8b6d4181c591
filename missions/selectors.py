"""Reads for the mission pages (and the API): the list, one mission's board, its history.

Each answers in a fixed number of queries whatever the number of missions, work packages or
people (tests/missions/test_queries.py pins them), and only from the workspaces the person
holds a role in; another workspace's mission reads as no mission at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Count, Q

from ephyra.core.mission import FINAL_MISSION_STATES, FINAL_WP_STATES, MissionState, Role, WPState
from journal.format import trailers
from missions.journal import mission_from_dict, mission_journal
from missions.models import Mission, MissionRole, WorkPackage
from missions.offers import Offer, mission_offers, mission_supersede_offer, wp_offers
from missions.roles import mission_people
from quests.models import Quest
from quests.roles import workspace_roles
from quests.selectors import CHECKPOINT_OF, readable_workspace_ids

PAGE_SIZE = 50
BASE_KINDS = ("text", "link", "file")
# The board's columns, the main line first.
WP_COLUMNS = (
    WPState.TODO,
    WPState.READY,
    WPState.IN_PROGRESS,
    WPState.CHECKING,
    WPState.DONE,
    WPState.BLOCKED,
    WPState.ESCALATED,
    WPState.FAILED,
)


def state_label(state: str) -> str:
    """A state as people read it: ``in_progress`` is ``IN PROGRESS``."""
    return state.replace("_", " ").upper()


def missions_page(user, *, workspace: str = "", state: str = "", page: Any = 1) -> Page:
    """One page of the missions ``user`` may read, newest first, each with ``wp_counts`` (WPs
    per state, in ``WP_COLUMNS`` order) and ``wp_total``: three queries (the person's
    workspaces, the count, the rows with their counts)."""
    readable = readable_workspace_ids(user)
    ids = list(readable.values())
    if workspace:
        ids = [readable[workspace]] if workspace in readable else []
    counts = {
        f"wp_{s.value}": Count("work_packages", filter=Q(work_packages__state=s.value))
        for s in WP_COLUMNS
    }
    rows = (
        Mission.objects.filter(workspace_id__in=ids)
        .select_related("workspace")
        .defer("data")
        .annotate(wp_total=Count("work_packages"), **counts)
        .order_by("workspace__slug", "-number", "-pk")
    )
    if state:
        rows = rows.filter(state=state)
    result = Paginator(rows, PAGE_SIZE).get_page(page)
    for row in result:
        row.wp_counts = [
            (s.value, state_label(s.value), getattr(row, f"wp_{s.value}")) for s in WP_COLUMNS
        ]
    return result


def mission_for(user, slug: str, mission_id: str, *, roles: dict | None = None) -> Mission | None:
    """The mission, if ``user`` may read its workspace (None otherwise, as for no mission).
    ``roles``: the person's ``workspace_roles``, when the caller read them already."""
    if slug not in (workspace_roles(user) if roles is None else roles):
        return None
    return (
        Mission.objects.select_related("workspace")
        .filter(workspace__slug=slug, mission_id=mission_id)
        .first()
    )


@dataclass
class Carrier:
    """The quest carrying a work package, as its projection says now."""

    quest_id: str
    found: bool  # False: not projected yet (queued for the worker) or gone
    state: str = ""
    revision: int = 0
    checkpoint: str = ""
    proof_digest: str = ""
    title: str = ""

    @property
    def abandoned(self) -> bool:
        return self.state == "abandoned"


@dataclass
class Card:
    """A work package on the board."""

    wp: WorkPackage
    carrier: Carrier | None
    offers: list[Offer]
    superseded_by: str = ""
    may_link: bool = False

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of evidence a form on this card offers: the quest's proof and state only
        when a quest carries the work package and has them."""
        kinds = BASE_KINDS
        if self.carrier is not None and self.carrier.proof_digest:
            kinds += ("proof",)
        if self.carrier is not None and self.carrier.found:
            kinds += ("quest",)
        return kinds


@dataclass
class Board:
    mission: Mission
    value: Any  # the machine's Mission at the projection's head
    columns: list[tuple[str, str, list[Card]]]  # state, its label, its cards
    offers: list[Offer]  # the mission's own moves for this person
    supersede: Offer | None
    held: frozenset[Role]
    people: dict[str, list[str]]
    superseded_by: list[Mission]
    ledger: list[dict]
    may_add: bool
    may_grant: bool
    cards: dict[str, Card] = field(default_factory=dict)


def mission_board(user, mission: Mission, *, roles: dict | None = None) -> Board:
    """The mission page's data: its work packages by state with their quests and the moves the
    person may make (the machine's answer), the mission's own moves, its people, the missions
    superseding it and its attempt ledger. Five queries, six without ``roles`` (the person's
    ``workspace_roles``, when the caller read them already)."""
    workspace = mission.workspace
    value = mission_from_dict(mission.data)
    roles = workspace_roles(user) if roles is None else roles
    held = _held(user, mission, roles.get(workspace.slug, frozenset()))
    actor = user.get_username()
    wps = list(WorkPackage.objects.filter(mission=mission).order_by("position"))
    carriers = _carriers(mission, [wp.quest_id for wp in wps if wp.quest_id])
    replaced = {wp.supersedes: wp.wp_id for wp in wps if wp.supersedes}
    cards: dict[str, Card] = {}
    for wp in wps:
        cards[wp.wp_id] = Card(
            wp=wp,
            carrier=carriers.get(wp.quest_id) if wp.quest_id else None,
            offers=wp_offers(value, wp.wp_id, held, actor),
            superseded_by=replaced.get(wp.wp_id, ""),
            may_link=Role.LEAD in held
            and WPState(wp.state) not in FINAL_WP_STATES
            and value.state not in FINAL_MISSION_STATES,
        )
    later = list(
        Mission.objects.filter(workspace=workspace, supersedes=mission.mission_id)
        .defer("data")
        .order_by("number")
    )
    columns = [
        (s.value, state_label(s.value), [c for c in cards.values() if c.wp.state == s.value])
        for s in WP_COLUMNS
    ]
    return Board(
        mission=mission,
        value=value,
        columns=columns,
        offers=mission_offers(value, held, actor),
        supersede=mission_supersede_offer(value, held, actor, superseded=bool(later)),
        held=held,
        people=mission_people(workspace, [mission.mission_id]).get(mission.mission_id, {}),
        superseded_by=later,
        ledger=list(reversed(mission.data.get("ledger", []))),
        may_add=Role.LEAD in held
        and MissionState(mission.state) in {MissionState.CREATED, MissionState.PLANNING},
        may_grant="admin" in {str(r) for r in roles.get(workspace.slug, ())},
        cards=cards,
    )


def _held(user, mission: Mission, roles: frozenset) -> frozenset[Role]:
    """The person's roles on the mission, usable only while they may decide in the workspace
    (``roles``: theirs there, as ``missions.roles.mission_roles`` reads them)."""
    if not {"reviewer", "admin"} & {str(r) for r in roles}:
        return frozenset()
    held = MissionRole.objects.filter(
        workspace_id=mission.workspace_id, mission_id=mission.mission_id, user_id=user.pk
    ).values_list("role", flat=True)
    return frozenset(Role(role) for role in held)


def _carriers(mission: Mission, quest_ids: list[str]) -> dict[str, Carrier]:
    found = {
        row["quest_id"]: row
        for row in Quest.objects.filter(
            workspace_id=mission.workspace_id, quest_id__in=quest_ids
        ).values("quest_id", "state", "revision", "resume_state", "title", "data__proof_digest")
    }
    carriers = {}
    for quest_id in quest_ids:
        row = found.get(quest_id)
        if row is None:
            carriers[quest_id] = Carrier(quest_id, False)
            continue
        state = row["state"]
        at = row["resume_state"] if state == "handed_off" and row["resume_state"] else state
        checkpoint = next((cp for s, cp in CHECKPOINT_OF.items() if str(s) == at), "")
        carriers[quest_id] = Carrier(
            quest_id,
            True,
            state=state,
            revision=row["revision"],
            checkpoint=checkpoint,
            proof_digest=row["data__proof_digest"] or "",
            title=row["title"],
        )
    return carriers


@dataclass(frozen=True)
class HistoryEntry:
    """One journaled decision of a mission."""

    at: datetime
    kind: str
    subject: str
    before: str
    after: str
    actor: str
    role: str
    evidence: dict[str, dict]
    note: str
    commit: str
    detail: dict = field(default_factory=dict)  # new_id, title, quest


def mission_history(mission: Mission) -> list[HistoryEntry]:
    """Every journaled decision of the mission, newest first, read from its journal."""
    journal = mission_journal(mission.workspace)
    entries = []
    for snapshot in journal.history(mission.mission_id):
        request = snapshot.request
        said = trailers(journal.repo[snapshot.commit].message)  # type: ignore[attr-defined]
        before = said.get("Ephyra-Previous-State", "none")
        entries.append(
            HistoryEntry(
                at=datetime.fromisoformat(request["at"]),
                kind=request["kind"],
                subject=said.get("Ephyra-Subject", ""),
                before="" if before == "none" else before,
                after=said.get("Ephyra-State", ""),
                actor=request["actor"],
                role=request.get("role", ""),
                evidence=request.get("evidence", {}),
                note=request.get("note", ""),
                commit=str(snapshot.commit),
                detail={k: request[k] for k in ("new_id", "title", "quest") if request.get(k)},
            )
        )
    return entries
