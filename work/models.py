"""What the work app keeps in the database: the regression probes of landed quests.

A probe is a quest's reproduction (the command, the test node ids, the failure it showed),
kept when the quest lands so that every later proof in the workspace runs it again: a later
patch that brings the regression back fails its proof. The reproduction's evidence is kept
whole, so the probe runs exactly as the reproduction did (``Reproduction.from_evidence``).
"""

from django.db import models

from quests.models import Workspace
from work.watch_models import Watch

__all__ = ["RegressionProbe", "Watch"]


class RegressionProbe(models.Model):
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="regression_probes"
    )
    quest_id = models.CharField(max_length=128)
    revision = models.PositiveIntegerField()
    # The ledger key of the register_regression_probe that made it: registering is idempotent
    # by it (a second delivery finds the probe there).
    key = models.CharField(max_length=300)
    fingerprint = models.CharField(max_length=200)
    command = models.TextField(help_text="The reproduction as one line a person can paste.")
    node_ids = models.JSONField(default=list, blank=True)
    reproduction = models.JSONField(help_text="The reproduction's evidence, to run it again.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "key"], name="probe_unique_key")
        ]
        indexes = [models.Index(fields=["workspace", "created_at"], name="probe_by_workspace")]

    def __str__(self) -> str:
        return f"{self.workspace_id} {self.quest_id} r{self.revision}"
