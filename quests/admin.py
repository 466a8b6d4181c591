from django.contrib import admin

from quests.models import PolicyVersion, Quest, Workspace


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "base_branch", "repository")
    search_fields = ("slug", "name")


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    list_display = ("workspace", "digest", "reviewed_by", "created_at")
    readonly_fields = ("workspace", "digest", "text", "reviewed_by", "created_at")


@admin.register(Quest)
class QuestAdmin(admin.ModelAdmin):
    """Read-only: a quest moves only through the engine, never by editing its projection."""

    list_display = ("quest_id", "workspace", "state", "revision", "severity", "claim", "updated_at")
    list_filter = ("state", "severity", "workspace")
    search_fields = ("quest_id", "fingerprint", "title")

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False
