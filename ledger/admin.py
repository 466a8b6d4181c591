"""The ledger, the worker leases, usage and the audit log: viewable, never edited here.

An operation is settled by ``manage.py ledger resolve`` (audited), a lease by the workers, an
inbound event by the worker that applies it; the audit log is append-only.
"""

from django.contrib import admin

from ephyra.readonly_admin import ReadOnlyAdmin
from ledger.models import AuditEntry, InboundEvent, Lease, Operation, UsageReceipt


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = ("key", "workspace", "type", "state", "attempts", "updated_at")
    list_filter = ("state", "type", "workspace")
    search_fields = ("key", "quest_id")


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
