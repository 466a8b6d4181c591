"""Usage receipts: what a quest cost, from whoever reported it (agent, runner, model backend).

Receipts are rows, not transitions, so a late receipt for a closed quest is still recorded.
Each carries the reporter's own receipt id as its key: a report sent twice is stored once.
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from ledger.models import UsageReceipt


def record_usage(
    workspace,
    quest_id: str,
    *,
    key: str,
    source: str,
    cost_micros: int = 0,
    tokens: int = 0,
    runner_seconds: int = 0,
    detail: dict | None = None,
    at: datetime | None = None,
) -> tuple[UsageReceipt, bool]:
    """Store a receipt; ``(receipt, created)``. Negative amounts are refused."""
    if min(cost_micros, tokens, runner_seconds) < 0:
        raise ValueError("usage amounts are never negative")
    try:
        with transaction.atomic():
            receipt = UsageReceipt.objects.create(
                workspace=workspace,
                quest_id=quest_id,
                key=key,
                source=source,
                cost_micros=cost_micros,
                tokens=tokens,
                runner_seconds=runner_seconds,
                detail=detail or {},
                recorded_at=at or timezone.now(),
            )
    except IntegrityError:
        return UsageReceipt.objects.get(key=key), False
    return receipt, True


def quest_usage(workspace, quest_id: str) -> dict[str, int]:
    totals = UsageReceipt.objects.filter(workspace=workspace, quest_id=quest_id).aggregate(
        cost_micros=Sum("cost_micros"), tokens=Sum("tokens"), runner_seconds=Sum("runner_seconds")
    )
    return {name: value or 0 for name, value in totals.items()}
