"""OTLP intake: the ingest tokens senders present, and the signals their exports carried.

A token row keeps a salted digest of the token, never the token; the signal rows keep only
redacted text (``ephyra.telemetry`` redacts before anything reaches here).
"""

from django.db import models

from ephyra.telemetry import FIELD_LIMITS


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
    (``event`` says which route it took; ``docs/grouping.md``)."""

    class Event(models.TextChoices):
        SENSED = "signal_sensed"  # opened a quest (with ``parent``: a conflict child)
        MERGED = "signal_merged"
        REOPENED = "regression_reopened"
        MUTED = "muted"  # counted on its FingerprintMute; no quest event

    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="ingested_signals"
    )
    token = models.ForeignKey(
        IngestToken, null=True, on_delete=models.SET_NULL, related_name="signals"
    )
    signal_id = models.CharField(max_length=128)
    quest_id = models.CharField(max_length=128)
    event = models.CharField(max_length=24, choices=Event.choices)
    parent = models.CharField(
        max_length=128, blank=True, help_text="The quest whose patch this conflict child waits for."
    )
    source = models.CharField(max_length=12)  # "log" or "span_event"
    severity = models.CharField(max_length=10)
    fingerprint = models.CharField(max_length=200)
    fingerprint_version = models.PositiveSmallIntegerField()
    # Texts ingest cuts to FIELD_LIMITS: the columns are made from the same table.
    title = models.CharField(max_length=FIELD_LIMITS["title"], blank=True)
    culprit = models.CharField(max_length=FIELD_LIMITS["culprit"], blank=True)
    exception_type = models.CharField(max_length=FIELD_LIMITS["exception_type"], blank=True)
    message = models.TextField(max_length=FIELD_LIMITS["message"], blank=True)
    service = models.CharField(max_length=FIELD_LIMITS["service"], blank=True)
    service_version = models.CharField(max_length=FIELD_LIMITS["service_version"], blank=True)
    environment = models.CharField(max_length=FIELD_LIMITS["environment"], blank=True)
    trace_id = models.CharField(max_length=32, blank=True)
    span_id = models.CharField(max_length=16, blank=True)
    frames = models.JSONField(default=list)
    paths = models.JSONField(default=list, help_text="Normalised paths of the in-app frames.")
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
            # The quest page's latest signals of one quest: without it, a scan of every signal.
            models.Index(fields=["workspace", "quest_id", "-received_at"], name="ingested_quest"),
        ]

    def __str__(self) -> str:
        return f"{self.signal_id} → {self.quest_id}"


class FingerprintMute(models.Model):
    """A fingerprint muted by a quest triaged ``ignore``: until ``until``, its signals are
    stored and counted here instead of opening quests. One row per muting quest, so the
    ``mute_fingerprint`` effect is idempotent and an expired mute stays as history."""

    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="fingerprint_mutes"
    )
    quest_id = models.CharField(max_length=128)
    fingerprint = models.CharField(max_length=200)
    until = models.DateTimeField()
    muted_signals = models.PositiveIntegerField(
        default=0, help_text="Signals taken while the mute held."
    )
    last_signal_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "quest_id"], name="mute_unique_quest")
        ]
        indexes = [
            models.Index(fields=["workspace", "fingerprint", "until"], name="mute_fingerprint"),
        ]

    def __str__(self) -> str:
        return f"{self.fingerprint[:15]}… until {self.until:%Y-%m-%d %H:%M}"


class MinuteCount(models.Model):
    """How many signals of one fingerprint a workspace received in one minute (the minute the
    export arrived, UTC), whatever route each took (muted ones too): the exact count, however
    intake folds the quest events. One upsert per export and fingerprint adds to it."""

    workspace = models.ForeignKey(
        "quests.Workspace",
        on_delete=models.CASCADE,
        related_name="minute_counts",
        db_index=False,  # the unique index below begins with the workspace
    )
    fingerprint = models.CharField(max_length=200)
    minute = models.DateTimeField(help_text="The minute's first instant.")
    signals = models.PositiveBigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "fingerprint", "minute"], name="minute_count_unique"
            )
        ]
        indexes = [
            # A watch's sums: every fingerprint of a workspace over a span of minutes.
            models.Index(fields=["workspace", "minute"], name="minute_count_span"),
        ]

    def __str__(self) -> str:
        return f"{self.fingerprint[:15]}… {self.minute:%Y-%m-%d %H:%M}: {self.signals}"


class MergeWindow(models.Model):
    """How intake folds the repeated signals of one open quest into ``signal_merged`` events
    (``intake.otlp.sightings``): when it submitted the quest's last one, and the signals merged
    since that no event carries yet (``held``), with the one the next event names."""

    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="merge_windows"
    )
    quest_id = models.CharField(max_length=128)
    fingerprint = models.CharField(max_length=200)
    last_event_at = models.DateTimeField(help_text="When its last signal_merged was submitted.")
    held = models.PositiveBigIntegerField(default=0, help_text="Signals no event carries yet.")
    # The held signal the next event names: the most severe, the first of those.
    signal_id = models.CharField(max_length=128, blank=True)
    severity = models.CharField(max_length=10, blank=True)
    title = models.CharField(max_length=FIELD_LIMITS["title"], blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "quest_id"], name="merge_window_quest")
        ]

    def __str__(self) -> str:
        return f"{self.quest_id}: {self.held} held"


class RefusedExports(models.Model):
    """How many OTLP exports were refused in one minute (UTC), by reason (``docs/otlp.md``'s
    status codes by name): what the metrics endpoint reports as rejected signals. An export
    refused before its token was known has no workspace, so none is kept here."""

    minute = models.DateTimeField(help_text="The minute's first instant.")
    reason = models.CharField(max_length=40)
    exports = models.PositiveBigIntegerField()

    class Meta:
        verbose_name_plural = "refused exports"
        constraints = [
            models.UniqueConstraint(fields=["minute", "reason"], name="refused_exports_unique")
        ]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.reason}: {self.exports}"
