from django.contrib import admin

from ephyra.readonly_admin import ReadOnlyAdmin
from work.models import RegressionProbe, Watch


@admin.register(Watch)
class WatchAdmin(ReadOnlyAdmin):
    """Read-only: a watch is opened by ``start_watch`` and judged by the worker."""

    list_display = ("quest_id", "revision", "workspace", "state", "since", "ends_at", "summary")
    list_filter = ("state",)


@admin.register(RegressionProbe)
class RegressionProbeAdmin(ReadOnlyAdmin):
    list_display = ("quest_id", "revision", "workspace", "command", "created_at")
    list_filter = ("workspace",)
    search_fields = ("quest_id", "fingerprint", "command")
