"""OTLP intake: the ingest tokens senders present, and the signals their exports carried.

A token row keeps a salted digest of the token, never the token; the signal rows keep only
redacted text (``ephyra.ingest`` redacts before anything reaches here).
"""

from django.db import models


class IngestToken(models.Model):
    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="ingest_tokens"
    )
    name = models.CharField(max_length=100, blank=True)
    digest = models.CharField(
        max_length=200, unique=True, help_text="sha256$<salt>$<digest> of the token."
    )
    prefix = models.CharField(max_length=12, help_text="The token's first characters, to tell it.")
    created_at = models.DateTimeField(auto_now_add=True)
    active = models.BooleanField(default=True)

    class Meta:
        indexes = [models.Index(fields=["prefix"], name="ingest_token_prefix")]

    def __str__(self) -> str:
        return f"{self.workspace_id}:{self.prefix}… {self.name}".strip()


class IngestedSignal(models.Model):
    """One error an OTLP export carried, redacted and fingerprinted, and the quest it went to
    (``event`` says whether it opened the quest or was merged into it)."""

    class Event(models.TextChoices):
        SENSED = "signal_sensed"
        MERGED = "signal_merged"

    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="ingested_signals"
    )
    token = models.ForeignKey(
        IngestToken, null=True, on_delete=models.SET_NULL, related_name="signals"
    )
    signal_id = models.CharField(max_length=128)
    quest_id = models.CharField(max_length=128)
    event = models.CharField(max_length=16, choices=Event.choices)
    source = models.CharField(max_length=12)  # "log" or "span_event"
    severity = models.CharField(max_length=10)
    fingerprint = models.CharField(max_length=200)
    fingerprint_version = models.PositiveSmallIntegerField()
    title = models.CharField(max_length=4000, blank=True)
    culprit = models.CharField(max_length=4000, blank=True)
    exception_type = models.CharField(max_length=1000, blank=True)
    message = models.TextField(blank=True)
    service = models.CharField(max_length=1000, blank=True)
    service_version = models.CharField(max_length=1000, blank=True)
    environment = models.CharField(max_length=1000, blank=True)
    trace_id = models.CharField(max_length=32, blank=True)
    span_id = models.CharField(max_length=16, blank=True)
    frames = models.JSONField(default=list)
    occurred_at = models.DateTimeField(null=True)
    received_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "signal_id"], name="ingested_signal_unique_id"
            )
        ]
        indexes = [
            models.Index(fields=["workspace", "fingerprint"], name="ingested_fingerprint"),
        ]

    def __str__(self) -> str:
        return f"{self.signal_id} → {self.quest_id}"
