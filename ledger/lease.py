"""One worker at a time per workspace: a lease with a heartbeat and a fencing generation.

A worker acquires a workspace's lease, renews it on every heartbeat, and loses it when it stops
renewing. Another worker may take over an expired lease; the generation then rises by one.
Every state-changing write runs ``fence_check`` first, inside its own transaction: the check is
an UPDATE of the lease row that matches only the holder's owner and generation, so it both
refuses a worker that lost its lease and holds the row lock until the write commits; a takeover
(also an UPDATE of that row) waits for the write to finish and never overlaps it.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from ledger.models import Lease


class LeaseLost(Exception):
    """This worker no longer holds the workspace's lease; its write was refused."""


@dataclass(frozen=True, slots=True)
class Fence:
    workspace_id: int
    owner: str
    generation: int


def worker_identity() -> str:
    """Unique per process start: a restarted worker is a new owner, never its old self."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def lease_ttl() -> timedelta:
    return timedelta(milliseconds=settings.EPHYRA_LEASE_MS)


def lease_acquire(workspace_id: int, owner: str, *, now: datetime | None = None) -> Fence | None:
    """Take the lease if it is free, expired or already ours; ``None`` while another live
    worker holds it. Taking it from anyone (or from nobody) starts a new generation."""
    now = now or timezone.now()
    expires = now + lease_ttl()
    with transaction.atomic():
        lease = Lease.objects.select_for_update().filter(workspace_id=workspace_id).first()
        if lease is None:
            try:
                with transaction.atomic():
                    Lease.objects.create(
                        workspace_id=workspace_id,
                        owner=owner,
                        generation=1,
                        acquired_at=now,
                        heartbeat_at=now,
                        expires_at=expires,
                    )
            except IntegrityError:
                return None  # another worker created it first; it holds the lease now
            return Fence(workspace_id, owner, 1)
        live = lease.owner and lease.expires_at is not None and lease.expires_at > now
        if live and lease.owner == owner:
            lease.heartbeat_at, lease.expires_at = now, expires
            lease.save(update_fields=["heartbeat_at", "expires_at"])
            return Fence(workspace_id, owner, lease.generation)
        if live:
            return None
        lease.owner, lease.generation = owner, lease.generation + 1
        lease.acquired_at = lease.heartbeat_at = now
        lease.expires_at = expires
        lease.save()
        return Fence(workspace_id, owner, lease.generation)


def lease_renew(fence: Fence, *, now: datetime | None = None) -> bool:
    """The heartbeat. False when the lease expired or was taken: stop serving the workspace."""
    now = now or timezone.now()
    return bool(
        Lease.objects.filter(
            workspace_id=fence.workspace_id,
            owner=fence.owner,
            generation=fence.generation,
            expires_at__gt=now,
        ).update(heartbeat_at=now, expires_at=now + lease_ttl())
    )


def lease_release(fence: Fence) -> None:
    """Hand the lease back on a clean shutdown, so the next worker need not wait for expiry."""
    Lease.objects.filter(
        workspace_id=fence.workspace_id, owner=fence.owner, generation=fence.generation
    ).update(owner="", expires_at=timezone.now())


def fence_check(fence: Fence) -> None:
    """Call first inside the transaction of a state-changing write. Refuses a worker whose
    lease expired or was taken over, and locks the lease row until the transaction ends."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("fence_check must run inside the write's transaction")
    held = Lease.objects.filter(
        workspace_id=fence.workspace_id,
        owner=fence.owner,
        generation=fence.generation,
        expires_at__gt=timezone.now(),
    ).update(generation=F("generation"))  # a write, so the row (SQLite: the database) is locked
    if not held:
        raise LeaseLost(
            f"workspace {fence.workspace_id}: lease generation {fence.generation} of "
            f"{fence.owner} is no longer held"
        )


class LeaseHeld(Exception):
    def __init__(self, workspace: str, owner: str) -> None:
        super().__init__(
            f"workspace {workspace} is served by worker {owner}; stop it, or queue the work "
            "for it (apply_events --submit)"
        )
        self.owner = owner


@contextmanager
def holding(workspace, purpose: str) -> Iterator[Fence]:
    """Serve a workspace for the length of a command, as a worker would: a command that
    changes quests while a worker serves the workspace is refused, never interleaved."""
    fence = lease_acquire(workspace.pk, f"{purpose}:{worker_identity()}")
    if fence is None:
        owner = Lease.objects.filter(pk=workspace.pk).values_list("owner", flat=True).first()
        raise LeaseHeld(workspace.slug, owner or "?")
    try:
        yield fence
    finally:
        lease_release(fence)
