from django.contrib import admin

from ledger.models import AuditEntry, Operation


@admin.register(Operation)
class OperationAdmin(admin.ModelAdmin):
    list_display = ("key", "type", "state", "attempts", "updated_at")
    list_filter = ("state", "type")
    search_fields = ("key", "quest_id")

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """The audit log is append-only: nothing here edits or deletes it."""

    list_display = ("workspace", "sequence", "at", "actor", "action", "object")
    list_filter = ("workspace", "action")

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
