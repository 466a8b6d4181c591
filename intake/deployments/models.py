"""Deployments Ephyra has heard of: which commit runs in which environment, since when, who said
so, and what became of it (``intake.deployments.services`` is the one writer)."""

from django.db import models


class Deployment(models.Model):
    """One deployment of ``commit`` to ``environment``. It stays ``pending`` (``reason`` says
    why) while a quest is still landing or the mirror lacks a commit, and is ``decided`` once
    the quests it carries out have been told (``quests``; none is a decision too)."""

    class State(models.TextChoices):
        PENDING = "pending"
        DECIDED = "decided"

    workspace = models.ForeignKey(
        "quests.Workspace",
        on_delete=models.CASCADE,
        related_name="deployments",
        db_index=False,  # the unique index below begins with the workspace
    )
    # A full commit id, or the prefix a forge gave (GitLab may send eight digits).
    commit = models.CharField(max_length=64)
    environment = models.CharField(max_length=200)
    production = models.BooleanField()
    source = models.CharField(max_length=40, help_text="webhook:<forge>, command or otlp.")
    actor = models.CharField(max_length=200)
    at = models.DateTimeField(help_text="When the commit was deployed (or first seen running).")
    recorded_at = models.DateTimeField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    reason = models.CharField(max_length=1000, blank=True)
    missing = models.BooleanField(default=False, help_text="Waits for a commit the mirror lacks.")
    quests = models.JSONField(default=list, help_text="Ids of the quests it was applied to.")
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # Recorded once: the first report of a commit in an environment is its deployment.
            models.UniqueConstraint(
                fields=["workspace", "commit", "environment"], name="deployment_unique"
            )
        ]
        indexes = [
            models.Index(fields=["workspace", "state", "-at"], name="deployment_pending"),
        ]

    def __str__(self) -> str:
        return f"{self.commit[:12]} → {self.environment} ({self.state})"
