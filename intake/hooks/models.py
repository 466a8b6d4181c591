"""Forge hooks, the deliveries they received, and the reviews tied to quests.

A hook row never holds a secret: it names where the secret is read (``env:NAME`` or
``file:/path``), or, for a GitLab token Ephyra generated, keeps a salted digest of it.
"""

from django.db import models
from django.db.models import Q


class Hook(models.Model):
    class Kind(models.TextChoices):
        GITHUB = "github", "GitHub"
        GITLAB = "gitlab", "GitLab"
        GITEA = "gitea", "Gitea"
        FORGEJO = "forgejo", "Forgejo"

    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="hooks"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices)
    secret_ref = models.CharField(
        max_length=1000,
        blank=True,
        help_text="Where the secret is read: env:NAME or file:/path. Never the secret itself.",
    )
    token_hash = models.CharField(
        max_length=200,
        blank=True,
        help_text="GitLab only: a salted SHA-256 of a token Ephyra generated.",
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "kind"], name="hook_unique_kind"),
            models.CheckConstraint(
                condition=(~Q(secret_ref="") & Q(token_hash=""))
                | (Q(secret_ref="") & ~Q(token_hash="") & Q(kind="gitlab")),
                name="hook_one_secret_source",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workspace_id}:{self.kind}"


class WebhookDelivery(models.Model):
    """One delivery a forge made, kept whatever became of it: the unique delivery id is what
    makes a redelivery (or two racing copies) count once."""

    class Outcome(models.TextChoices):
        PROCESSED = "processed"  # mapped to quest events (possibly none)
        RECORDED = "recorded"  # a fact kept for later readers; no quest event fits it
        IGNORED = "ignored"  # an event type or action Ephyra does not act on

    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="webhook_deliveries"
    )
    hook = models.ForeignKey(Hook, null=True, on_delete=models.SET_NULL, related_name="deliveries")
    forge = models.CharField(max_length=10, choices=Hook.Kind.choices)
    delivery_id = models.CharField(max_length=100)
    event = models.CharField(max_length=100)
    received_at = models.DateTimeField()
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    events = models.PositiveIntegerField(default=0, help_text="Quest events submitted.")
    quests = models.JSONField(default=list, help_text="Ids of the quests it concerned.")
    details = models.JSONField(default=dict, help_text="What it stated: sha, ref, reason…")

    class Meta:
        verbose_name_plural = "webhook deliveries"
        constraints = [
            # Per workspace: GitLab gives every hook one event triggers the same event UUID, and
            # two workspaces may watch the same repository.
            models.UniqueConstraint(
                fields=["workspace", "forge", "delivery_id"], name="delivery_unique_id"
            )
        ]
        indexes = [
            models.Index(fields=["workspace", "-received_at"], name="delivery_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.forge}:{self.delivery_id}"


class ReviewLink(models.Model):
    """A pull request (merge request) that names a quest by branch or marker, remembered so a
    later comment on it, whose payload names neither, still reaches the quest."""

    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="review_links"
    )
    forge = models.CharField(max_length=10, choices=Hook.Kind.choices)
    repository = models.CharField(max_length=500)
    number = models.PositiveBigIntegerField()
    quest_id = models.CharField(max_length=128)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "forge", "repository", "number", "quest_id"],
                name="review_link_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.repository}#{self.number} → {self.quest_id}"


class RefusedDeliveries(models.Model):
    """How many forge webhook deliveries were refused in one minute (UTC), by forge and reason
    (a bad signature is ``unauthenticated``): what the metrics endpoint reports, since a refused
    delivery leaves no ``WebhookDelivery`` row. Kept without the workspace: a refusal before the
    hook was found (404) has none, and an attacker's guesses should not make rows per slug."""

    minute = models.DateTimeField(help_text="The minute's first instant.")
    forge = models.CharField(max_length=10)
    reason = models.CharField(max_length=40)
    deliveries = models.PositiveBigIntegerField()

    class Meta:
        verbose_name_plural = "refused deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "forge", "reason"], name="refused_deliveries_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.forge} {self.reason}: {self.deliveries}"
