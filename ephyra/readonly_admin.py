"""The admin's view of what only the engine, the worker or intake writes."""

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """Viewable, never added, changed or deleted here, so no bulk delete either.

    Projections are rebuilt from the journals, the ledger and the audit log record what
    happened, and a row deleted here would come back on repair or be delivered again."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
