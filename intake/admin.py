from django import forms
from django.contrib import admin
from django.utils import timezone

from ephyra.readonly_admin import ReadOnlyAdmin
from intake.hooks.credentials import validate_reference
from intake.models import (
    Deployment,
    Hook,
    IngestedSignal,
    IngestToken,
    ReviewLink,
    WebhookDelivery,
)
from intake.otlp.models import FingerprintMute


class HookForm(forms.ModelForm):
    class Meta:
        model = Hook
        fields = ("workspace", "kind", "secret_ref", "active")

    def clean_secret_ref(self):
        reference = self.cleaned_data["secret_ref"]
        if not reference and not (self.instance and self.instance.token_hash):
            raise forms.ValidationError("give env:NAME or file:/path")
        if reference:
            try:
                validate_reference(reference)
            except ValueError as exc:
                raise forms.ValidationError(str(exc)) from None
        return reference


@admin.register(Hook)
class HookAdmin(admin.ModelAdmin):
    """A token digest is made only by ``manage.py hooks add --generate-token``."""

    form = HookForm
    list_display = ("workspace", "kind", "secret_ref", "active", "created_at")
    list_filter = ("kind", "active")
    readonly_fields = ("token_hash", "created_at")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    """Read-only: deliveries are what the forges sent."""

    list_display = (
        "delivery_id",
        "workspace",
        "forge",
        "event",
        "outcome",
        "events",
        "received_at",
    )
    list_filter = ("forge", "outcome", "workspace")
    search_fields = ("delivery_id", "event")


@admin.register(ReviewLink)
class ReviewLinkAdmin(ReadOnlyAdmin):
    list_display = ("repository", "number", "quest_id", "workspace", "forge", "created_at")
    search_fields = ("repository", "quest_id")


@admin.register(IngestToken)
class IngestTokenAdmin(admin.ModelAdmin):
    """Made by ``manage.py ingest_tokens add`` (which shows the token once); here only named
    and switched off."""

    list_display = ("prefix", "workspace", "name", "active", "created_at")
    list_filter = ("active", "workspace")
    fields = ("workspace", "name", "prefix", "active", "created_at")
    readonly_fields = ("workspace", "prefix", "created_at")

    def has_add_permission(self, request):
        return False


@admin.register(IngestedSignal)
class IngestedSignalAdmin(ReadOnlyAdmin):
    """Read-only: what the OTLP exports carried, already redacted."""

    list_display = (
        "signal_id",
        "workspace",
        "event",
        "quest_id",
        "parent",
        "severity",
        "received_at",
    )
    list_filter = ("event", "severity", "workspace")
    search_fields = ("signal_id", "quest_id", "parent", "fingerprint", "title")


@admin.register(FingerprintMute)
class FingerprintMuteAdmin(ReadOnlyAdmin):
    """Read-only: a mute is made by triage (route ``ignore``) and counted by intake."""

    list_display = (
        "fingerprint",
        "workspace",
        "quest_id",
        "until",
        "holds",
        "muted_signals",
        "last_signal_at",
    )
    list_filter = ("workspace",)
    search_fields = ("fingerprint", "quest_id")
    ordering = ("-until",)

    @admin.display(boolean=True, description="holds now")
    def holds(self, mute: FingerprintMute) -> bool:
        return mute.until > timezone.now()


@admin.register(Deployment)
class DeploymentAdmin(ReadOnlyAdmin):
    """Read-only: deployments are written by their service alone (docs/work.md)."""

    list_display = ("commit", "workspace", "environment", "source", "state", "reason", "at")
    list_filter = ("state", "environment", "source")
