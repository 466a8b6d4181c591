from django.contrib import admin

from ephyra.readonly_admin import ReadOnlyAdmin
from work.models import RegressionProbe


@admin.register(RegressionProbe)
class RegressionProbeAdmin(ReadOnlyAdmin):
    list_display = ("quest_id", "revision", "workspace", "command", "created_at")
    list_filter = ("workspace",)
    search_fields = ("quest_id", "fingerprint", "command")
