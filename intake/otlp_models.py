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
