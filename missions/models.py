"""The projections of missions and their work packages, and the roles people hold on them.

A mission's truth is its Git journal (``refs/ephyra/missions/<id>``, ``missions.journal``);
``Mission`` and ``WorkPackage`` rows are what pages read, moved by ``missions.services`` after
each journal write and rebuilt by ``manage.py repair``. ``MissionRole`` is not a projection:
an admin of the workspace gives a role on a mission to an account, and that is kept here (and
audited), not in the journal.
"""

from django.conf import settings
from django.db import models

from ephyra.core.mission import MissionState, Role, WPState

MISSION_STATE_CHOICES = [(s.value, s.value) for s in MissionState]
WP_STATE_CHOICES = [(s.value, s.value) for s in WPState]
# The roles a person can hold on a mission; ``circuit`` is the automatic breaker, no one's.
PERSON_ROLES = (Role.LEAD, Role.MAKER, Role.DEBUGGER, Role.CHECKER, Role.HUMAN, Role.HIGHER)
ROLE_CHOICES = [(r.value, r.value) for r in PERSON_ROLES]


class Mission(models.Model):
    """The projection of one mission's journal head."""

    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="missions", db_index=False
    )
    mission_id = models.CharField(max_length=64)
    number = models.PositiveIntegerField(help_text="The n of the id m<n>: the list's order.")
    title = models.CharField(max_length=200)
    state = models.CharField(max_length=16, choices=MISSION_STATE_CHOICES)
    supersedes = models.CharField(
        max_length=64, blank=True, help_text="The FAILED mission this one replaces."
    )
    revision = models.PositiveIntegerField(help_text="Journal commits so far.")
    attempts = models.PositiveIntegerField(help_text="Entries in the attempt ledger.")
    created_request = models.CharField(max_length=64, help_text="The request that created it.")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    journal_head = models.CharField(max_length=64)
    data = models.JSONField(help_text="The whole mission at the journal head, with its links.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "mission_id"], name="mission_unique_id")
        ]
        indexes = [models.Index(fields=["workspace", "-number"], name="mission_list")]

    def __str__(self) -> str:
        return f"{self.mission_id} ({self.state})"


class WorkPackage(models.Model):
    """The projection of one work package at its mission's journal head."""

    mission = models.ForeignKey(Mission, on_delete=models.CASCADE, related_name="work_packages")
    wp_id = models.CharField(max_length=64)
    position = models.PositiveIntegerField(help_text="The order it was added in.")
    title = models.CharField(max_length=200)
    state = models.CharField(max_length=16, choices=WP_STATE_CHOICES)
    supersedes = models.CharField(
        max_length=64, blank=True, help_text="The FAILED work package this one replaces."
    )
    quest_id = models.CharField(max_length=128, blank=True, help_text="The quest carrying it.")
    makers = models.JSONField(default=list, help_text="Everyone who produced a result for it.")
    checker = models.CharField(max_length=200, blank=True, help_text="Who passed its check.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["mission", "wp_id"], name="wp_unique_id")]

    def __str__(self) -> str:
        return f"{self.wp_id} ({self.state})"


class MissionRole(models.Model):
    """An account holds a role on a mission of a workspace. Keyed by the mission's id, not the
    projection row, so rebuilding projections never drops a role."""

    workspace = models.ForeignKey(
        "quests.Workspace", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    mission_id = models.CharField(max_length=64)
    # An account, never a name: "the checker is not the maker" compares accounts. Deactivate a
    # person, never delete them.
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    role = models.CharField(max_length=10, choices=ROLE_CHOICES)
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    granted_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "mission_id", "user", "role"], name="mission_role_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.mission_id}: {self.user_id} {self.role}"
