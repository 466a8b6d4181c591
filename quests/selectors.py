"""Reads for pages, the API and commands: the inbox, one quest, its timeline and its effects.

Each selector answers in a fixed number of queries whatever the number of rows (the tests pin
the counts), and reads only what the person may see: the workspaces they hold a role in.

The inbox's cost stays flat as quests pile up (``benchmarks/inbox.py``): its counts stop at
``COUNT_CAP`` rows and read "1,000+" past it, as GitHub's and Sentry's lists do, and its default
order (latest first) is the order of a partial index of the waiting quests
(``quest_waiting_recent``), so the database reads one page of it instead of sorting them all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from functools import reduce
from operator import or_

from django.core.paginator import Page
from django.db.models import Case, Exists, IntegerField, OuterRef, Q, QuerySet, Value, When
from django.db.models.functions import Concat

from ephyra.core.canonical import canonical_digest
from ephyra.core.states import Severity, State
from ephyra.paging import COUNT_CAP, CappedPaginator, Tally, capped_counts, page_number
from journal.format import PROOF_DIR, PROOF_FILE
from ledger.models import InboundEvent, Operation
from quests.models import WAITING_STATES, Quest, Workspace
from quests.roles import Role, workspace_roles
from quests.workspaces import workspace_journal

# States in which a quest waits for a person, and the checkpoint each one stands at.
CHECKPOINT_OF = {
    State.HYPOTHESISED: "A",
    State.PLANNED: "B",
    State.READY: "C",
}
SORTS = {
    "updated": "-updated_at",
    "oldest": "updated_at",
    "created": "-created_at",
    "signals": "-signal_count",
    "severity": "severity",
    "title": "title",
}
PAGE_SIZE = 50
# Counts stop here and read "1,000+" past it: counting every match costs as much as reading
# them, and nobody pages through a thousand quests. A whole number of pages.


def checkpoint_of(quest: Quest) -> str:
    """The checkpoint a quest stands at ("A", "B", "C"), or "" when it stands at none; a
    claimed review stands at the checkpoint it was claimed at."""
    state = State(quest.state)
    if state is State.HANDED_OFF and quest.resume_state:
        return CHECKPOINT_OF.get(State(quest.resume_state), "")
    return CHECKPOINT_OF.get(state, "")


@dataclass(frozen=True)
class InboxFilters:
    workspace: str = ""
    state: str = ""
    checkpoint: str = ""
    severity: str = ""
    route: str = ""
    mine: bool = False
    unclaimed: bool = False
    text: str = ""
    at_checkpoint: bool = False  # only quests standing at A, B or C, unclaimed
    sort: str = "updated"
    waiting: bool = True  # only quests that wait for a person; False: every quest


def readable_workspaces(user) -> list[str]:
    """The slugs of the workspaces ``user`` holds any role in."""
    return sorted(workspace_roles(user))


def readable_workspace_ids(user) -> dict[str, int]:
    """The workspaces ``user`` holds any role in, as ``readable_workspaces`` reads them from
    the role groups (``<slug>:<role>``), by slug with their ids, in one query.

    Lists filter their rows on these ids, not on a join with the slugs: given the ids, the
    database knows from its statistics how many rows they keep; given slugs, it guesses a
    tenth, and past the first pages of the inbox it sorted every waiting quest instead of
    reading its index in order."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return {}
    workspaces = Workspace.objects.all()
    if not user.is_superuser:
        held = user.groups.filter(
            reduce(or_, (Q(name=Concat(OuterRef("slug"), Value(f":{role}"))) for role in Role))
        )
        workspaces = workspaces.filter(Exists(held))
    return dict(workspaces.values_list("slug", "id"))


def quests_for(user, filters: InboxFilters) -> QuerySet[Quest]:
    """The quests ``user`` may read that match ``filters``, sorted; not yet evaluated."""
    readable = readable_workspace_ids(user)
    ids = list(readable.values())
    if filters.workspace:
        ids = [readable[filters.workspace]] if filters.workspace in readable else []
    rows = Quest.objects.filter(workspace_id__in=ids).select_related("workspace")
    if filters.waiting:
        rows = rows.filter(state__in=[str(s) for s in WAITING_STATES])
    if filters.state:
        rows = rows.filter(state=filters.state)
    if filters.checkpoint:
        states = [str(s) for s, cp in CHECKPOINT_OF.items() if cp == filters.checkpoint]
        rows = rows.filter(
            Q(state__in=states) | Q(state=State.HANDED_OFF, resume_state__in=states)
        )
    if filters.at_checkpoint:
        rows = rows.filter(state__in=[str(s) for s in CHECKPOINT_OF])
    if filters.severity:
        rows = rows.filter(severity=filters.severity)
    if filters.route:
        rows = rows.filter(route=filters.route)
    if filters.mine:
        rows = rows.filter(claim=user.get_username())
    if filters.unclaimed:
        rows = rows.filter(claim="")
    if filters.text:
        rows = rows.filter(Q(title__icontains=filters.text) | Q(fingerprint=filters.text))
    order = SORTS.get(filters.sort, SORTS["updated"])
    if order == "severity":  # worst first: fatal, error, warning, info, debug
        rank = Case(
            *(When(severity=str(s), then=Value(n)) for n, s in enumerate(reversed(Severity))),
            default=Value(len(Severity)),
            output_field=IntegerField(),
        )
        rows, order = rows.annotate(severity_rank=rank), "severity_rank"
    # The primary key breaks ties, so a page never repeats or skips a quest; in the sort's own
    # direction, so that one index on (key, id) serves the sort both ways.
    tie = "-pk" if order.startswith("-") else "pk"
    return rows.order_by(order, tie).defer("data")


def inbox_page(user, filters: InboxFilters, page: int = 1) -> Page:
    """One page of ``quests_for``: two queries (the count and the rows). The count
    (``page.paginator.tally``) stops at ``COUNT_CAP`` quests, or at the end of the page asked
    for when that lies beyond."""
    bound = max(COUNT_CAP, page_number(page) * PAGE_SIZE)
    return CappedPaginator(quests_for(user, filters), PAGE_SIZE, bound).get_page(page)


def inbox_counts(user) -> dict[str, Tally]:
    """How many quests wait per tab, each up to ``COUNT_CAP``, in one query: at a checkpoint,
    claimed by ``user``, claimed by anyone, parked."""
    rows = Quest.objects.filter(workspace_id__in=readable_workspace_ids(user).values())
    handed_off = rows.filter(state=State.HANDED_OFF)
    return capped_counts(
        {
            "checkpoint": rows.filter(state__in=[str(s) for s in CHECKPOINT_OF]),
            "mine": handed_off.filter(claim=user.get_username()),
            "handed_off": handed_off,
            "parked": rows.filter(state=State.PARKED),
        }
    )


def quest_for(user, workspace_slug: str, quest_id: str) -> Quest | None:
    """The quest, if ``user`` may read its workspace (None otherwise, as for no quest: another
    workspace's quest is not revealed to exist)."""
    if workspace_slug not in workspace_roles(user):
        return None
    return (
        Quest.objects.select_related("workspace", "workspace__policy")
        .filter(workspace__slug=workspace_slug, quest_id=quest_id)
        .first()
    )


@dataclass(frozen=True)
class TimelineEntry:
    """One thing that happened to a quest: a journaled transition, or a refused event."""

    at: datetime
    event_id: str
    type: str
    actor: str
    outcome: str  # accepted, refused
    state_before: str | None
    state: str | None
    revision: int
    commit: str = ""  # the journal commit (accepted ones)
    reason: str = ""  # why it was refused
    effects: tuple[str, ...] = ()
    detail: dict = field(default_factory=dict)  # the event's own fields (comment body, …)


_NOT_DETAIL = {"id", "quest", "at", "actor", "type"}


def quest_timeline(quest: Quest) -> list[TimelineEntry]:
    """Every journal entry of the quest and every refused event submitted for it, newest
    first. The journal is read in one walk; the refusals in one query."""
    journal = workspace_journal(quest.workspace)
    entries = [
        TimelineEntry(
            at=entry.event.at,
            event_id=entry.event.id,
            type=entry.event.type,  # type: ignore[attr-defined]
            actor=entry.event.actor,
            outcome=entry.decision["outcome"],
            state_before=entry.decision["from"],
            state=entry.decision["state"],
            revision=entry.decision["revision"],
            commit=str(entry.oid),
            effects=tuple(effect["key"] for effect in entry.effects),
            detail={
                k: v
                for k, v in entry.event.model_dump(mode="json").items()
                if k not in _NOT_DETAIL
            },
        )
        for entry in journal.history(quest.quest_id)
    ]
    refused = InboundEvent.objects.filter(
        workspace_id=quest.workspace_id,
        quest_id=quest.quest_id,
        state__in=[InboundEvent.State.REFUSED, InboundEvent.State.DEAD],
    ).order_by("id")
    for row in refused:
        entries.append(
            TimelineEntry(
                at=row.applied_at or row.received_at,
                event_id=row.event_id,
                type=row.type,
                actor=str(row.payload.get("actor", "")),
                outcome="refused",
                state_before=row.result.get("state"),
                state=row.result.get("state"),
                revision=quest.revision,
                reason=row.result.get("reason") or row.result.get("error", ""),
                detail={k: v for k, v in row.payload.items() if k not in _NOT_DETAIL},
            )
        )
    entries.sort(key=lambda e: e.at, reverse=True)
    return entries


def quest_effects(quest: Quest) -> list[Operation]:
    """The quest's ledger operations, oldest first, in one query."""
    return list(
        Operation.objects.filter(workspace_id=quest.workspace_id, quest_id=quest.quest_id).order_by(
            "id"
        )
    )


def workspaces_for(user) -> list[Workspace]:
    return list(Workspace.objects.filter(slug__in=readable_workspaces(user)).order_by("slug"))


@dataclass(frozen=True)
class QuestProof:
    """The quest's proof bundle as its journal holds it, with the digest recorded and the one
    recomputed from the bundle (they must match)."""

    bundle: dict
    digest: str
    recomputed: str

    @property
    def matches(self) -> bool:
        return self.digest == self.recomputed


def quest_proof(quest: Quest) -> QuestProof | None:
    """The proof bundle journaled for the quest (None before there is one), for the API."""
    raw = workspace_journal(quest.workspace).read(quest.quest_id, f"{PROOF_DIR}/{PROOF_FILE}")
    if raw is None:
        return None
    stored = json.loads(raw)
    bundle = stored.get("bundle", {})
    return QuestProof(bundle, str(stored.get("digest", "")), canonical_digest(bundle))
