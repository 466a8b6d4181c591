"""The ledger, the worker leases, usage and the audit log: viewable, never edited here.

An operation is settled by ``manage.py ledger resolve`` (audited), a lease by the workers, an
inbound event by the worker that applies it; the audit log is append-only.
"""

from django.contrib import admin, messages

from ephyra.readonly_admin import ReadOnlyAdmin
from ledger.models import AuditEntry, InboundEvent, Lease, Operation, UsageReceipt
from ledger.selectors import waiting_without_adapter


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    """Read-only; the list says which effect types wait for an adapter the serving worker
    lacks, and how many operations wait on each (they stay pending until one is configured)."""

    list_display = ("key", "workspace", "type", "state", "attempts", "updated_at")
    list_filter = ("state", "type", "workspace")
    search_fields = ("key", "quest_id")

    def changelist_view(self, request, extra_context=None):
        for slug, kind, n in waiting_without_adapter():
            wait = "operations wait" if n != 1 else "operation waits"
            messages.warning(
                request,
                f"Workspace {slug}: {n} pending {kind} {wait}: the worker serving it has no "
                f"adapter for {kind} (EPHYRA_EFFECT_ADAPTERS).",
            )
        return super().changelist_view(request, extra_context)


@admin.register(InboundEvent)
class InboundEventAdmin(ReadOnlyAdmin):
    list_display = ("event_id", "workspace", "quest_id", "type", "state", "source", "received_at")
    list_filter = ("state", "type", "workspace")
    search_fields = ("event_id", "quest_id")


@admin.register(Lease)
class LeaseAdmin(ReadOnlyAdmin):
    list_display = ("workspace", "owner", "generation", "heartbeat_at", "expires_at")


@admin.register(UsageReceipt)
class UsageReceiptAdmin(ReadOnlyAdmin):
    list_display = ("quest_id", "workspace", "source", "cost_micros", "tokens", "recorded_at")
    list_filter = ("source", "workspace")
    search_fields = ("quest_id", "key")


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("workspace", "sequence", "at", "actor", "action", "object")
    list_filter = ("workspace", "action")
    search_fields = ("object", "actor")
