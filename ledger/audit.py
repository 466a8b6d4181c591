"""The hash-chained audit log: each entry's hash covers its content and the previous hash.

``entry_hash = canonical_digest({"sequence", "at", "actor", "action", "object", "payload",
"previous_hash"})``; the first entry of a workspace chains from ``GENESIS``. Editing, removing
or reordering an entry breaks every hash after it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ephyra.core.canonical import canonical_digest
from ledger.models import AuditEntry

GENESIS = "sha256:" + "0" * 64


def entry_digest(entry: AuditEntry) -> str:
    return canonical_digest(
        {
            "sequence": entry.sequence,
            # The database hands times back in UTC; hash them that way so verify agrees.
            "at": entry.at.astimezone(UTC).isoformat(),
            "actor": entry.actor,
            "action": entry.action,
            "object": entry.object,
            "payload": entry.payload,
            "previous_hash": entry.previous_hash,
        }
    )


def audit_append(
    workspace, *, at: datetime, actor: str, action: str, object: str, payload: dict[str, Any]
) -> AuditEntry:
    """Append one entry. Call inside the transaction of the change it records, after locking
    the workspace row (``select_for_update``), so two writers cannot take the same sequence."""
    last = (
        AuditEntry.objects.filter(workspace=workspace)
        .order_by("-sequence")
        .values_list("sequence", "entry_hash")
        .first()
    )
    sequence, previous = (last[0] + 1, last[1]) if last else (1, GENESIS)
    entry = AuditEntry(
        workspace=workspace,
        sequence=sequence,
        at=at,
        actor=actor,
        action=action,
        object=object,
        payload=payload,
        previous_hash=previous,
    )
    entry.entry_hash = entry_digest(entry)
    entry.save(force_insert=True)
    return entry


def audit_verify(workspace) -> tuple[int, str | None]:
    """(entries verified, the first problem or None)."""
    previous, expected_sequence, count = GENESIS, 1, 0
    for entry in AuditEntry.objects.filter(workspace=workspace).order_by("sequence").iterator():
        if entry.sequence != expected_sequence:
            return count, f"entry {expected_sequence} is missing (found {entry.sequence})"
        if entry.previous_hash != previous:
            return count, f"entry {entry.sequence} does not chain from entry {entry.sequence - 1}"
        if entry_digest(entry) != entry.entry_hash:
            return count, f"entry {entry.sequence} was altered"
        previous, expected_sequence, count = entry.entry_hash, expected_sequence + 1, count + 1
    return count, None
