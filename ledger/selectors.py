"""Reads of the ledger and the audit log for pages, the API and commands.

The caller passes the workspaces the person may read (``quests.roles``); each selector answers
in a fixed number of queries whatever the number of rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.core.paginator import Page
from django.db.models import Count, QuerySet
from django.utils import timezone

from ephyra.paging import COUNT_CAP, CappedPaginator, page_number
from ledger.models import AuditEntry, InboundEvent, Lease, Operation

PAGE_SIZE = 50
# Operations that wait for a person: a write whose outcome is unknown, a job that kept failing.
NEEDS_A_PERSON = (Operation.State.AMBIGUOUS, Operation.State.DEAD)


@dataclass(frozen=True)
class AuditFilters:
    workspace: str = ""
    actor: str = ""
    action: str = ""
    quest: str = ""
    since: datetime | None = None
    until: datetime | None = None


def audit_entries(workspace_slugs: list[str], filters: AuditFilters) -> QuerySet[AuditEntry]:
    """Audit entries of these workspaces matching ``filters``, newest first."""
    rows = AuditEntry.objects.filter(workspace__slug__in=workspace_slugs).select_related(
        "workspace"
    )
    if filters.workspace:
        rows = rows.filter(workspace__slug=filters.workspace)
    if filters.actor:
        rows = rows.filter(actor=filters.actor)
    if filters.action:
        rows = rows.filter(action=filters.action)
    if filters.quest:
        rows = rows.filter(object=f"quest:{filters.quest}")
    if filters.since:
        rows = rows.filter(at__gte=filters.since)
    if filters.until:
        rows = rows.filter(at__lt=filters.until)
    return rows.order_by("-at", "-pk")


def audit_page(workspace_slugs: list[str], filters: AuditFilters, page: int = 1) -> Page:
    """One page of ``audit_entries``: two queries (the count and the rows). The count
    (``page.paginator.tally``) stops at ``COUNT_CAP`` entries, or at the end of the page asked
    for when that lies beyond: the trail only grows, and counting it whole grew with it."""
    bound = max(COUNT_CAP, page_number(page) * PAGE_SIZE)
    rows = audit_entries(workspace_slugs, filters)
    return CappedPaginator(rows, PAGE_SIZE, bound).get_page(page)


def operations(
    workspace_slugs: list[str], *, state: str = "", type: str = "", quest: str = ""
) -> QuerySet[Operation]:
    """Ledger operations of these workspaces, newest first."""
    rows = Operation.objects.filter(workspace__slug__in=workspace_slugs).select_related(
        "workspace"
    )
    if state:
        rows = rows.filter(state=state)
    if type:
        rows = rows.filter(type=type)
    if quest:
        rows = rows.filter(quest_id=quest)
    return rows.order_by("-pk")


@dataclass(frozen=True)
class LedgerFilters:
    workspace: str = ""
    state: str = ""
    type: str = ""
    quest: str = ""


def ledger_page(workspace_slugs: list[str], filters: LedgerFilters, page: int = 1) -> Page:
    """One page of the operations of these workspaces matching ``filters``, newest first:
    two queries (the count and the rows). A workspace outside ``workspace_slugs`` lists
    nothing."""
    slugs = workspace_slugs
    if filters.workspace:
        slugs = [filters.workspace] if filters.workspace in workspace_slugs else []
    rows = operations(slugs, state=filters.state, type=filters.type, quest=filters.quest)
    bound = max(COUNT_CAP, page_number(page) * PAGE_SIZE)
    return CappedPaginator(rows, PAGE_SIZE, bound).get_page(page)


def operation_totals(workspace_slugs: list[str]) -> dict[str, int]:
    """Operations per state over these workspaces, in one query: {state: n}, every state."""
    totals = dict.fromkeys(Operation.State.values, 0)
    rows = (
        Operation.objects.filter(workspace__slug__in=workspace_slugs)
        .values_list("state")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for state, n in rows:
        totals[state] = n
    return totals


def operation_of(workspace_slugs: list[str], workspace: str, key: str) -> Operation | None:
    """The operation ``key`` of ``workspace``, with its workspace, in one query; None when
    there is none or the workspace is not among ``workspace_slugs`` (not revealed to exist)."""
    if workspace not in workspace_slugs:
        return None
    return (
        Operation.objects.select_related("workspace")
        .filter(workspace__slug=workspace, key=key)
        .first()
    )


def operation_counts(workspace_slugs: list[str]) -> dict[str, dict[str, int]]:
    """Operations per workspace and state, in one query: {slug: {state: n}}."""
    counts: dict[str, dict[str, int]] = {slug: {} for slug in workspace_slugs}
    rows = (
        Operation.objects.filter(workspace__slug__in=workspace_slugs)
        .values_list("workspace__slug", "state")
        .annotate(n=Count("pk"))
    )
    for slug, state, n in rows:
        counts[slug][state] = n
    return counts


def waiting_by_type(workspace_slugs: list[str]) -> dict[str, dict[str, int]]:
    """Pending operations per workspace and effect type, in one query: {slug: {type: n}}."""
    counts: dict[str, dict[str, int]] = {slug: {} for slug in workspace_slugs}
    rows = (
        Operation.objects.filter(
            workspace__slug__in=workspace_slugs, state=Operation.State.PENDING
        )
        .values_list("workspace__slug", "type")
        .annotate(n=Count("pk"))
    )
    for slug, effect_type, n in rows:
        counts[slug][effect_type] = n
    return counts


def refused_events(
    workspace_slugs: list[str], *, quest: str = "", limit: int = 50
) -> list[InboundEvent]:
    """Submitted events the worker refused or gave up on, newest first, with their reasons."""
    rows = InboundEvent.objects.filter(
        workspace__slug__in=workspace_slugs,
        state__in=[InboundEvent.State.REFUSED, InboundEvent.State.DEAD],
    ).select_related("workspace")
    if quest:
        rows = rows.filter(quest_id=quest)
    return list(rows.order_by("-pk")[:limit])


def waiting_without_adapter() -> list[tuple[str, str, int]]:
    """(workspace, effect type, pending operations) for each type that the worker serving the
    workspace has no adapter for, as it said when it took the lease (``Lease.effect_types``),
    in two queries. A workspace no live worker serves is left out: nobody can say yet."""
    now = timezone.now()
    served = {
        lease.workspace_id: set(lease.effect_types)
        for lease in Lease.objects.filter(expires_at__gt=now).exclude(owner="")
    }
    rows = (
        Operation.objects.filter(state=Operation.State.PENDING, workspace_id__in=served)
        .values_list("workspace_id", "workspace__slug", "type")
        .annotate(n=Count("pk"))
        .order_by("workspace__slug", "type")
    )
    return [(slug, kind, n) for ws, slug, kind, n in rows if kind not in served[ws]]
