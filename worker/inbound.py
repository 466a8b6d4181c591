"""Applying submitted events: the worker's side of ``ledger.inbound``.

The lease holder takes the pending rows of its workspace in arrival order and applies them
through the engine under its fence, each row marked in the engine's own transaction. Rows of
distinct quests are applied as a group (``quests.engine.quest_apply_all``): one fenced
transaction, one commit for the group. A quest's rows keep their order: a row waits for the
next group when an earlier row of its quest is in this one. A group that fails is applied
again one row at a time, so a bad event costs only itself.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Sequence

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from ephyra.core.events import BaseEvent, parse_event
from ephyra.core.machine import REFUSED
from ephyra.sql import Statement, run_together
from ledger.inbound import REPAIR, REQUESTS, RESOLVE
from ledger.lease import Fence, LeaseLost, fence_check
from ledger.models import InboundEvent
from quests.engine import Outcome, quest_apply_all
from quests.models import Workspace
from quests.repair import repair_workspace
from quests.workspaces import workspace_journal
from worker import faults
from worker.delivery import fenced_apply, resolve_by_person

log = logging.getLogger(__name__)
GROUP = 50  # rows applied in one transaction at most


def inbound_groups(rows: Sequence[InboundEvent], size: int = GROUP) -> Iterator[list[InboundEvent]]:
    """``rows`` (in arrival order) in groups of at most ``size``, one row per quest, each
    quest's rows in their order; a request (a resolution: it changes an operation, then its
    quest; a repair) is a group of its own, after everything that arrived before it."""
    left = list(rows)
    while left:
        if left[0].type in REQUESTS:
            yield [left.pop(0)]
            continue
        group: list[InboundEvent] = []
        quests: set[str] = set()  # in the group, or waiting behind a row of theirs
        rest: list[InboundEvent] = []
        for i, row in enumerate(left):
            if row.type in REQUESTS or len(group) == size:
                rest += left[i:]
                break
            if row.quest_id in quests:
                rest.append(row)
            else:
                group.append(row)
            quests.add(row.quest_id)
        yield group
        left = rest


def apply_inbound(fence: Fence, workspace: Workspace, row: InboundEvent) -> None:
    """Apply one submitted event; the row is marked in the engine's own transaction."""
    if row.type == RESOLVE:
        _apply_resolution(fence, workspace, row)
        return
    if row.type == REPAIR:
        _apply_repair(fence, workspace, row)
        return
    event = _applicable(fence, workspace, row)
    if event is None:
        return
    try:
        fenced_apply(
            fence, workspace, event, then=lambda outcome: run_together([_mark(row, outcome)])
        )
    except LeaseLost:
        raise
    except Exception as exc:
        log.warning("inbound event %s raised", row.event_id, exc_info=True)
        row.attempts += 1
        if row.attempts >= settings.EPHYRA_MAX_DELIVERIES:
            _inbound_done(fence, row, InboundEvent.State.DEAD, {"error": str(exc)})
        else:
            InboundEvent.objects.filter(pk=row.pk).update(attempts=row.attempts)


def apply_group(fence: Fence, workspace: Workspace, rows: Sequence[InboundEvent]) -> None:
    """Apply a group from ``inbound_groups`` in one fenced transaction."""
    if len(rows) == 1:
        apply_inbound(fence, workspace, rows[0])
        return
    parsed: list[tuple[InboundEvent, BaseEvent]] = []
    for row in rows:
        event = _applicable(fence, workspace, row)
        if event is not None:
            parsed.append((row, event))
    if not parsed:
        return
    try:
        with transaction.atomic():
            fence_check(fence)
            outcomes = quest_apply_all(
                workspace,
                [event for _, event in parsed],
                after_journal=lambda: faults.reach("after_journal"),
            )
            marks = zip(parsed, outcomes, strict=True)
            run_together([_mark(row, outcome) for (row, _), outcome in marks])
    except LeaseLost:
        raise
    except Exception:
        # What was journaled before the failure is each quest's head; applied again alone, each
        # such event is answered from its journal (journal.apply), never decided twice.
        log.warning("a group of %d inbound events raised; applying them one by one", len(parsed))
        for row, _ in parsed:
            apply_inbound(fence, workspace, row)


def _applicable(fence: Fence, workspace: Workspace, row: InboundEvent) -> BaseEvent | None:
    """The row's event, or None when the row is settled here: ``dead`` when it is not an
    event, ``refused`` when the person who sent it saw a quest that has moved on since."""
    try:
        event = parse_event(row.payload)
    except ValueError as exc:
        _inbound_done(fence, row, InboundEvent.State.DEAD, {"error": str(exc)})
        return None
    stale = _moved_on(workspace, row)
    if stale:
        _inbound_done(fence, row, InboundEvent.State.REFUSED, {"reason": stale, "stale": True})
        return None
    return event


def _moved_on(workspace: Workspace, row: InboundEvent) -> str | None:
    """Why a person's event comes too late: the quest's journal moved on from the head they
    saw. None when it did not, or when the head is this very event (a redelivery, answered
    from the journal as the head's own). Race-free: the lease holder is the one writer."""
    if not row.expect_head:
        return None
    journal = workspace_journal(workspace)
    head = journal.head(row.quest_id)
    if head is None or str(head) == row.expect_head or journal.event_id(head) == row.event_id:
        return None
    return (
        f"the quest moved on since it was shown ({row.expect_head[:12]} is now {str(head)[:12]}): "
        "look again before you act"
    )


@functools.cache
def _mark_sql(vendor: str) -> str:
    qn = connection.ops.quote_name
    attempts = qn("attempts")
    return (
        f"UPDATE {qn(InboundEvent._meta.db_table)} SET {qn('state')} = %s, {qn('result')} = %s, "
        f"{qn('applied_at')} = %s, {attempts} = {attempts} + 1 WHERE {qn('id')} = %s"
    )


def _mark(row: InboundEvent, outcome: Outcome) -> Statement:
    """The row's update for an outcome: applied or refused, with the outcome's words."""
    decision = outcome.applied.decision
    refused = decision.outcome == REFUSED
    state = InboundEvent.State.REFUSED if refused else InboundEvent.State.APPLIED
    result = {"outcome": decision.outcome, "state": str(decision.state)}
    if refused:
        result["reason"] = decision.reason
    fields = InboundEvent._meta
    params = [
        str(state),
        fields.get_field("result").get_db_prep_save(result, connection),
        fields.get_field("applied_at").get_db_prep_save(timezone.now(), connection),
        row.pk,
    ]
    return Statement(_mark_sql(connection.vendor), params)


def _inbound_done(fence: Fence, row: InboundEvent, state: str, result: dict) -> None:
    with transaction.atomic():
        fence_check(fence)
        InboundEvent.objects.filter(pk=row.pk).update(
            state=state, result=result, applied_at=timezone.now()
        )


def _apply_resolution(fence: Fence, workspace: Workspace, row: InboundEvent) -> None:
    data = row.payload
    try:
        op = resolve_by_person(
            fence, workspace, data["key"], data["status"], actor=data["actor"], note=data["note"]
        )
    except ValueError as exc:
        _inbound_done(fence, row, InboundEvent.State.REFUSED, {"reason": str(exc)})
        return
    _inbound_done(fence, row, InboundEvent.State.APPLIED, {"state": op.state})


def _apply_repair(fence: Fence, workspace: Workspace, row: InboundEvent) -> None:
    """``manage.py repair`` asked while this worker serves the workspace: repair under the
    fence, and hand the report back in the row for the command that waits on it."""
    with transaction.atomic():
        fence_check(fence)
        report = repair_workspace(workspace)
        InboundEvent.objects.filter(pk=row.pk).update(
            state=InboundEvent.State.APPLIED,
            result={
                "summary": report.summary(),
                "created": report.projections_created,
                "updated": report.projections_updated,
                "operations": report.operations_created,
            },
            applied_at=timezone.now(),
        )
