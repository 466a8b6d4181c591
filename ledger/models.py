"""The operation ledger and the audit log.

An operation is one effect, unique by its key, so a replay that finds the key does not ask for
the effect again. The audit log is append-only and hash-chained per workspace.
"""

from django.db import models


class Operation(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"
        STARTED = "started"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        AMBIGUOUS = "ambiguous"
        DEAD = "dead"

    key = models.CharField(max_length=400, unique=True)
    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="operations"
    )
    quest_id = models.CharField(max_length=128)
    type = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    journal_commit = models.CharField(max_length=64, help_text="The transition that asked for it.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(fields=["workspace", "state", "created_at"], name="operation_queue"),
            models.Index(fields=["workspace", "quest_id"], name="operation_quest"),
        ]

    def __str__(self) -> str:
        return self.key


class AuditEntry(models.Model):
    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="audit_entries"
    )
    sequence = models.PositiveBigIntegerField()
    at = models.DateTimeField()
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=100)
    object = models.CharField(max_length=300)
    payload = models.JSONField(default=dict)
    previous_hash = models.CharField(max_length=80)
    entry_hash = models.CharField(max_length=80)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "sequence"], name="audit_unique_sequence")
        ]

    def __str__(self) -> str:
        return f"{self.workspace_id}#{self.sequence} {self.action}"
