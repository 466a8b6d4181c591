"""Celery tasks of intake: the timer that ends a quest's merge window
(``intake.otlp.sightings``)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from intake.otlp.sightings import CARRY_TASK, merges_carry
from quests.models import Workspace


@shared_task(name=CARRY_TASK, ignore_result=True)
def carry_merges(workspace_id: int, quest_id: str) -> None:
    """Submit the ``signal_merged`` that carries what the quest's window held, now that the
    window is over. Run twice, or after the next export carried them, it finds nothing held."""
    workspace = Workspace.objects.filter(pk=workspace_id).first()
    if workspace is not None:
        merges_carry(workspace, quest_id, timezone.now())
