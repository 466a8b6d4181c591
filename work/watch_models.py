"""A quest's watch of production after its fix landed: its window, what it compares, and what
it concluded (``work.watch`` writes it; ``work.watch_figures`` counts for it)."""

from django.db import models


class Watch(models.Model):
    """One watch per quest revision. The window runs ``minutes`` from ``since``: the deployment
    that carried the landed commit out, or the landing until a deployment is seen (the window
    then moves to it)."""

    class State(models.TextChoices):
        OPEN = "open"
        CLEAN = "clean"
        REGRESSION = "regression"
        ENDED = "ended"  # the quest left watching by another way (paused, killed)

    workspace = models.ForeignKey(
        "quests.Workspace",
        on_delete=models.CASCADE,
        related_name="watches",
        db_index=False,  # the unique index below begins with the workspace
    )
    quest_id = models.CharField(max_length=128)
    revision = models.PositiveIntegerField()
    fingerprint = models.CharField(max_length=200, help_text="The fixed error's fingerprint.")
    landed_commit = models.CharField(max_length=64)
    deployed_commit = models.CharField(max_length=64, blank=True)
    environment = models.CharField(max_length=200, blank=True)
    files = models.JSONField(default=list, help_text="The files the patch changed.")
    minutes = models.PositiveIntegerField()
    since = models.DateTimeField(help_text="When the window opened.")
    ends_at = models.DateTimeField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN)
    summary = models.CharField(max_length=4000, blank=True)
    figures = models.JSONField(default=dict, help_text="What the last judgement counted.")
    judged_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "quest_id", "revision"], name="watch_unique_revision"
            )
        ]
        indexes = [models.Index(fields=["workspace", "state"], name="watch_open")]

    def __str__(self) -> str:
        return f"{self.quest_id} r{self.revision}: {self.state}"
