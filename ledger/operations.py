"""The operation rows' own steps, each in one fenced transaction: claim, record an outcome,
supersede, take over an orphan, settle an ambiguous or dead one.

These change only ledger rows. Calling adapters and feeding their events back to the engine is
the worker's part (``worker.delivery``). Every step starts with ``fence_check``, so a worker
that lost its lease changes nothing; a step on a row that is no longer in the state it expects
changes nothing either, and says so by its return value.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ledger.lease import Fence, LeaseLost, fence_check
from ledger.models import Operation

State = Operation.State
# One line per recorded outcome (docs/observability.md): with EPHYRA_LOG_FORMAT=json, a JSON
# object with the key, type, quest, state and how long the delivery took.
outcomes = logging.getLogger("ephyra.effects")


def _log_outcome(op: Operation, state: str) -> None:
    seconds = None
    if op.started_at is not None and op.finished_at is not None:
        seconds = round((op.finished_at - op.started_at).total_seconds(), 6)
    outcomes.info(
        "effect %s %s: %s",
        op.type,
        op.key,
        state,
        extra={
            "key": op.key,
            "effect_type": op.type,
            "quest": op.quest_id,
            "state": state,
            "attempts": op.attempts,
            "duration_seconds": seconds,
        },
    )


def holds_claim(fence: Fence, op: Operation) -> bool:
    """Does this worker still hold its lease and its claim on ``op``?"""
    try:
        with transaction.atomic():
            fence_check(fence)
            return Operation.objects.filter(
                pk=op.pk, state=State.STARTED, owner=fence.owner, generation=fence.generation
            ).exists()
    except LeaseLost:
        return False


def claim(fence: Fence, op: Operation) -> bool:
    """pending → started for this worker; the delivery counter rises. False if another took it."""
    with transaction.atomic():
        fence_check(fence)
        now = timezone.now()
        # Matching the attempts read makes the row's new values known without reading it back.
        changes = {
            "state": State.STARTED,
            "owner": fence.owner,
            "generation": fence.generation,
            "attempts": op.attempts + 1,
            "started_at": now,
            "updated_at": now,
        }
        taken = Operation.objects.filter(
            pk=op.pk, state=State.PENDING, attempts=op.attempts
        ).update(**changes)
    if taken:
        for name, value in changes.items():
            setattr(op, name, value)
    return bool(taken)


def claim_batch(fence: Fence, ops: list[Operation]) -> list[Operation]:
    """Claim several retry-safe operations in one fenced transaction: one commit, not one per
    effect. Only reads and computations go this way: a crash after the claim sends them back to
    pending, and their adapters deduplicate by key. A write is claimed alone (``claim``), so it
    is checked against its claim right before it is sent."""
    if not ops:
        return []
    now = timezone.now()
    pks = [op.pk for op in ops]
    with transaction.atomic():
        fence_check(fence)
        Operation.objects.filter(pk__in=pks, state=State.PENDING).update(
            state=State.STARTED,
            owner=fence.owner,
            generation=fence.generation,
            attempts=F("attempts") + 1,
            started_at=now,
            updated_at=now,
        )
        # The started time tells this claim from an older one of the same owner and generation.
        taken = dict(
            Operation.objects.filter(
                pk__in=pks,
                state=State.STARTED,
                owner=fence.owner,
                generation=fence.generation,
                started_at=now,
            ).values_list("pk", "attempts")
        )
    claimed = []
    for op in ops:
        if op.pk in taken:
            op.state, op.owner, op.generation = State.STARTED, fence.owner, fence.generation
            op.attempts, op.started_at, op.updated_at = taken[op.pk], now, now
            claimed.append(op)
    return claimed


def finish(
    fence: Fence,
    op: Operation,
    state: str,
    outcome: dict,
    *,
    then: Callable[[], None] | None = None,
    **extra,
) -> bool:
    """Record an outcome, only if this worker's claim is still the operation's claim. ``then``
    runs in the same transaction when the row changed (the audit entry of an ambiguous one)."""
    with transaction.atomic():
        fence_check(fence)
        now = timezone.now()
        changes = {"state": state, "outcome": outcome, "finished_at": now, "updated_at": now}
        changes |= extra
        done = Operation.objects.filter(
            pk=op.pk, state=State.STARTED, owner=fence.owner, generation=fence.generation
        ).update(**changes)
        if done and then is not None:
            then()
    if done:
        for name, value in changes.items():
            setattr(op, name, value)
        _log_outcome(op, state)
    return bool(done)


def finish_many(fence: Fence, results: list[tuple[Operation, str, dict]]) -> list[Operation]:
    """Record the outcomes (state, outcome) of several of this worker's claims in one
    transaction; the operations whose claim still held."""
    if not results:
        return []
    done = []
    with transaction.atomic():
        fence_check(fence)
        now = timezone.now()
        for op, state, outcome in results:
            changes = {"state": state, "outcome": outcome, "finished_at": now, "updated_at": now}
            if Operation.objects.filter(
                pk=op.pk, state=State.STARTED, owner=fence.owner, generation=fence.generation
            ).update(**changes):
                for name, value in changes.items():
                    setattr(op, name, value)
                done.append(op)
    for op, state, _ in results:
        if op in done:
            _log_outcome(op, state)
    return done


def supersede(fence: Fence, op: Operation, reason: str) -> None:
    """A pending effect its quest no longer asks for: never delivered, recorded as failed."""
    with transaction.atomic():
        fence_check(fence)
        now = timezone.now()
        Operation.objects.filter(pk=op.pk, state=State.PENDING).update(
            state=State.FAILED,
            outcome={"status": "superseded", "detail": {"reason": reason}, "events": []},
            finished_at=now,
            updated_at=now,
        )
    _log_outcome(op, "superseded")


def take_over(fence: Fence, op: Operation) -> None:
    """Make a started operation of an earlier claim this worker's, so the outcome recorded for
    it next (``finish``) is recorded under this worker's fence."""
    with transaction.atomic():
        fence_check(fence)
        Operation.objects.filter(pk=op.pk, state=State.STARTED).update(
            owner=fence.owner, generation=fence.generation
        )
    op.refresh_from_db()


def settle(
    fence: Fence,
    op: Operation,
    status: str,
    outcome: dict,
    *,
    then: Callable[[], None] | None = None,
) -> None:
    """Settle an ambiguous or dead operation: ``absent`` (it certainly did not happen) sends it
    back to pending for a fresh delivery; any other status is its final state. ``then`` runs in
    the same transaction (the audit entry). Raises ValueError when the row is in another state."""
    again = status == "absent"
    with transaction.atomic():
        fence_check(fence)
        now = timezone.now()
        done = Operation.objects.filter(pk=op.pk, state__in=[State.AMBIGUOUS, State.DEAD]).update(
            state=State.PENDING if again else status,
            outcome=outcome,
            finished_at=None if again else now,
            updated_at=now,
            due_at=now,
            owner="",
        )
        if not done:
            raise ValueError(f"{op.key} is {op.state}, not ambiguous or dead")
        if then is not None:
            then()
    op.refresh_from_db()
    _log_outcome(op, op.state)
