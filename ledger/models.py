"""The operation ledger, the worker lease, inbound events, usage receipts and the audit log.

An operation is one effect, unique by its key, so a replay that finds the key does not ask for
the effect again. The lease makes one worker at a time the writer of a workspace; its
generation fences every state-changing write. The audit log is append-only and hash-chained.
"""

from django.db import models
from django.utils import timezone


class Operation(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"
        STARTED = "started"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        AMBIGUOUS = "ambiguous"
        DEAD = "dead"

    key = models.CharField(max_length=400)
    # No index of its own: the composite indexes below start with the workspace.
    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="operations", db_index=False
    )
    quest_id = models.CharField(max_length=128)
    type = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    # Our own delivery counter: each claim adds one, so a job that keeps coming back (it kills
    # its worker, say) goes to dead letters instead of looping.
    attempts = models.PositiveIntegerField(default=0)
    journal_commit = models.CharField(max_length=64, help_text="The transition that asked for it.")
    # Due times live here, not in broker ETAs: a retry waits in the database.
    due_at = models.DateTimeField(default=timezone.now)
    owner = models.CharField(max_length=200, blank=True, help_text="The worker that claimed it.")
    generation = models.PositiveBigIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.JSONField(default=dict, blank=True)
    # How many of the outcome's events the engine has taken; the rest are fed back on restart.
    events_applied = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # A constraint rather than unique=True: on PostgreSQL that would add a second index
        # (varchar_pattern_ops, for LIKE), and every ledger row written pays for each index.
        constraints = [models.UniqueConstraint(fields=["key"], name="operation_unique_key")]
        indexes = [
            models.Index(fields=["workspace", "state", "due_at"], name="operation_queue"),
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
        verbose_name_plural = "audit entries"
        constraints = [
            models.UniqueConstraint(fields=["workspace", "sequence"], name="audit_unique_sequence")
        ]
        # The audit trail's page, newest first: read one page of it in order, not sort it all.
        indexes = [models.Index(fields=["-at", "-id"], name="audit_recent")]

    def __str__(self) -> str:
        return f"{self.workspace_id}#{self.sequence} {self.action}"


class Lease(models.Model):
    """Who serves a workspace. Taking over an expired lease raises the generation, and every
    state-changing write checks the generation in its own transaction (fencing)."""

    workspace = models.OneToOneField(
        "quests.Workspace", on_delete=models.CASCADE, primary_key=True, related_name="lease"
    )
    owner = models.CharField(max_length=200, blank=True)
    generation = models.PositiveBigIntegerField(default=0)
    acquired_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # The effect types the holder has adapters for, as it said when it took the lease: pending
    # operations of any other type wait until a worker that serves them holds the lease.
    effect_types = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"{self.workspace_id} gen {self.generation} ({self.owner or 'free'})"


class JournalReplica(models.Model):
    """How far a workspace's journal remote is confirmed: what the worker last pushed and
    whether it worked. ``pushed`` maps each journal ref to the head the remote confirmed;
    ``unconfirmed`` counts the transitions (commits) on this host's refs beyond it at the last
    attempt, and ``unconfirmed_since`` is when the oldest of them was first seen unpushed, so a
    push that keeps failing is a growing lag, not a silent one. ``blocked`` is set while a
    worker refuses the workspace because the journal it fetched is behind the database."""

    workspace = models.OneToOneField(
        "quests.Workspace", on_delete=models.CASCADE, primary_key=True, related_name="replica"
    )
    remote = models.CharField(max_length=1000, blank=True)
    pushed = models.JSONField(default=dict, blank=True)
    unconfirmed = models.PositiveIntegerField(default=0)
    unconfirmed_since = models.DateTimeField(null=True, blank=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    failures = models.PositiveIntegerField(default=0)  # consecutive failed pushes
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    blocked = models.TextField(blank=True)
    blocked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.workspace_id}: {self.unconfirmed} unconfirmed"

    def lag_seconds(self, now) -> float:
        """Seconds since the oldest unconfirmed transition was first seen (0 when none)."""
        if not self.unconfirmed or self.unconfirmed_since is None:
            return 0.0
        return max(0.0, (now - self.unconfirmed_since).total_seconds())


class InboundEvent(models.Model):
    """An event waiting for the workspace's worker: web requests, webhooks and commands in
    other processes enqueue here, and only the lease holder changes quests."""

    class State(models.TextChoices):
        PENDING = "pending"
        APPLIED = "applied"
        REFUSED = "refused"
        DEAD = "dead"

    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="inbound_events", db_index=False
    )
    event_id = models.CharField(max_length=128)
    quest_id = models.CharField(max_length=128)
    type = models.CharField(max_length=40)
    payload = models.JSONField()
    source = models.CharField(max_length=200)
    # The quest's journal head the submitter saw (a person's action): the worker refuses the
    # event when the quest has moved on from it. Blank: apply to whatever the head is.
    expect_head = models.CharField(max_length=64, blank=True, default="")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    result = models.JSONField(default=dict, blank=True)
    received_at = models.DateTimeField(default=timezone.now)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "event_id"], name="inbound_unique_event")
        ]
        indexes = [models.Index(fields=["workspace", "state", "id"], name="inbound_queue")]

    def __str__(self) -> str:
        return f"{self.event_id} ({self.type}, {self.state})"


class UsageReceipt(models.Model):
    """Spend against a quest, from the source that reported it. A table, not a transition, so a
    receipt that arrives after the quest closed is still kept."""

    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="usage_receipts"
    )
    quest_id = models.CharField(max_length=128)
    key = models.CharField(max_length=400, unique=True, help_text="The reporter's receipt id.")
    source = models.CharField(max_length=100, help_text="agent, runner, model backend, ...")
    cost_micros = models.BigIntegerField(default=0, help_text="Cost in millionths of a dollar.")
    tokens = models.BigIntegerField(default=0)
    runner_seconds = models.BigIntegerField(default=0)
    detail = models.JSONField(default=dict, blank=True)
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["workspace", "quest_id"], name="usage_quest")]

    def __str__(self) -> str:
        return f"{self.quest_id} {self.source} {self.key}"
