"""Workspaces, their policy versions and proposals, and the quest projection.

The projection is what pages and lists read; the truth of a quest is its Git journal, and
``python manage.py repair`` rebuilds these rows from it.
"""

from pathlib import Path

from django.conf import settings
from django.db import models
from django.db.models import Q

from ephyra.core.states import Severity, State

STATE_CHOICES = [(s.value, s.value) for s in State]
# The states in which a quest waits for a person: at checkpoint A, B or C, claimed, parked.
WAITING_STATES = (
    State.HYPOTHESISED,
    State.PLANNED,
    State.READY,
    State.HANDED_OFF,
    State.PARKED,
)
SEVERITY_CHOICES = [(s.value, s.value) for s in Severity]


class DataPathField(models.CharField):
    """A path that is kept relative to the data directory when it lies inside it, and read
    back against this process's data directory: two hosts with their own disks (and their
    own ``EPHYRA_DATA_DIR``) each find the workspace's mirror on their own disk. A path
    outside the data directory is kept as it is."""

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if value and Path(value).is_absolute():
            try:
                return str(Path(value).relative_to(Path(settings.DATA_DIR)))
            except ValueError:
                return value
        return value

    def from_db_value(self, value, expression, connection):
        if value and not Path(value).is_absolute():
            return str(Path(settings.DATA_DIR) / value)
        return value


class Workspace(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    repository = DataPathField(
        max_length=1000,
        help_text="Path of the repository mirror that holds the journals (relative to the "
        "data directory when inside it).",
    )
    base_branch = models.CharField(max_length=200, default="main")
    remote = models.CharField(max_length=1000, blank=True, help_text="Where journals are pushed.")
    # Where the worker pushes the journals after each group of transitions, and fetches them
    # from when it takes the workspace over: a path or URL, without credentials (git's helper
    # or EPHYRA_GIT_CREDENTIALS_FILE supplies them). Blank: the journals stay on this disk.
    journal_remote = models.CharField(
        max_length=1000,
        blank=True,
        help_text="Path or URL the worker pushes the journals to after every group of "
        "transitions and fetches them from on taking over; no credentials.",
    )
    policy = models.ForeignKey(
        "PolicyVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class PolicyVersion(models.Model):
    """A reviewed autonomy policy text; the workspace points at the current one."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="policies")
    digest = models.CharField(max_length=80)
    text = models.TextField()
    reviewed_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "digest"], name="policy_unique_digest")
        ]

    def __str__(self) -> str:
        return f"{self.workspace.slug} {self.digest[:15]}"


class PolicyProposal(models.Model):
    """A request to make a version its workspace's current policy: four eyes. One admin
    proposes it; another admin approves it (only then does ``Workspace.policy`` change) or
    rejects it; the proposer may withdraw it. A workspace has at most one open proposal."""

    class State(models.TextChoices):
        OPEN = "open"
        APPROVED = "approved"
        REJECTED = "rejected"
        WITHDRAWN = "withdrawn"

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="policy_proposals"
    )
    version = models.ForeignKey(PolicyVersion, on_delete=models.CASCADE, related_name="proposals")
    # Accounts, not names: the four-eyes rule compares them. Deactivate a person, never delete.
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    note = models.TextField(blank=True, help_text="Why the proposer wants this change.")
    reason = models.TextField(blank=True, help_text="Why it was rejected or withdrawn.")
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace"],
                condition=Q(state="open"),
                name="policy_one_open_proposal",
            )
        ]

    def __str__(self) -> str:
        return f"{self.workspace_id} proposal #{self.pk} ({self.state})"


class Quest(models.Model):
    """The projection of one quest's journal head."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="quests", db_index=False
    )
    quest_id = models.CharField(max_length=128)
    state = models.CharField(max_length=16, choices=STATE_CHOICES)
    revision = models.PositiveIntegerField()
    route = models.CharField(max_length=20, blank=True)
    risk = models.CharField(max_length=10, blank=True)
    fingerprint = models.CharField(max_length=200)
    severity = models.CharField(max_length=10, choices=SEVERITY_CHOICES)
    title = models.CharField(max_length=4000, blank=True)
    claim = models.CharField(max_length=200, blank=True)
    resume_state = models.CharField(max_length=16, blank=True)
    park_reason = models.CharField(max_length=200, blank=True)
    signal_count = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    journal_head = models.CharField(max_length=64)
    data = models.JSONField(help_text="The whole quest at the journal head.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "quest_id"], name="quest_unique_id")
        ]
        indexes = [
            # The inbox: quests waiting at a checkpoint or held, newest first.
            models.Index(fields=["workspace", "state", "-updated_at"], name="quest_inbox"),
            models.Index(fields=["workspace", "fingerprint"], name="quest_fingerprint"),
            models.Index(fields=["claim"], name="quest_claim"),
            # The inbox's default view, the waiting quests latest first (and oldest first,
            # read backwards): the database reads one page of this index and stops, where
            # quest_inbox, led by the workspace and the state, leaves it every waiting quest of
            # the person's workspaces to sort. Partial, so it holds only the waiting quests.
            models.Index(
                fields=["-updated_at", "-id"],
                name="quest_waiting_recent",
                condition=models.Q(state__in=[str(s) for s in WAITING_STATES]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.quest_id} ({self.state})"
