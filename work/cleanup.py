"""Worktrees of quests that ended are removed: a quest's checkouts live under the data
directory while it works (one per revision), and go when it is closed or abandoned. Their
branches stay in the mirror: they hold the patches, the landed one and the ones given up."""

from __future__ import annotations

from pathlib import Path

from ephyra.core.states import TERMINAL
from ephyra.runner import remove_quest_worktrees
from quests.models import Quest, Workspace
from work.context import worktrees_root


def remove_ended_worktrees(data_dir: Path, workspace: Workspace) -> list[str]:
    """Remove the worktrees of the workspace's ended quests; the quests whose went."""
    root = worktrees_root(data_dir, workspace)
    if not root.is_dir():
        return []
    present = [entry.name for entry in root.iterdir() if entry.is_dir()]
    ended = set(
        Quest.objects.filter(
            workspace=workspace, quest_id__in=present, state__in=[str(s) for s in TERMINAL]
        ).values_list("quest_id", flat=True)
    )
    gone = []
    for quest_id in sorted(ended):
        remove_quest_worktrees(Path(workspace.repository), root, quest_id)
        gone.append(quest_id)
    return gone
