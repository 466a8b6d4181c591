"""What a step needs, gathered from the database and the workspace's mirror: the quest as it is,
its workspace's policy, what its signal said (frames, message, first sighting), the quests of
the same fingerprint, the commit to work at, a fresh worktree for the revision, and the
environment its commands may see.

The steps themselves (``ephyra.agent``) know nothing of Django; this module is the bridge.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ephyra.agent.inputs import EarlierQuest, Frame, SignalFacts, Workdir
from ephyra.core.ports import EffectFailed, EffectRequest, Runner
from ephyra.policy import AutonomyPolicy
from ephyra.runner import Worktree, WorktreeError, prepare_worktree
from intake.models import IngestedSignal
from quests.models import Quest, Workspace
from quests.workspaces import commit_of, workspace_policy_document
from work.watch import watch_evidence
from work.watch_models import Watch

FETCH_SECONDS = 300


@dataclass(frozen=True)
class StepContext:
    workspace: Workspace
    quest: Quest
    policy: AutonomyPolicy
    revision: int
    signal: SignalFacts
    earlier: tuple[EarlierQuest, ...]
    head: str  # the commit the step works at (deployed, else the base branch's tip)
    fetch_problem: str | None  # why the mirror could not be brought up to date, if it could not
    # The revision before, when its fix was watched: what landed, where it ran, what was seen.
    previous: dict | None = None


def gather(request: EffectRequest) -> StepContext:
    workspace = Workspace.objects.select_related("policy").get(slug=request.workspace)
    quest = Quest.objects.get(workspace=workspace, quest_id=request.quest_id)
    revision = int(request.payload.get("revision") or quest.revision)
    problem = refresh_mirror(workspace)
    return StepContext(
        workspace=workspace,
        quest=quest,
        policy=workspace_policy_document(workspace),
        revision=revision,
        signal=signal_facts(quest),
        earlier=earlier_quests(quest),
        head=head_commit(workspace, quest),
        fetch_problem=problem,
        previous=previous_revision(quest, revision),
    )


def previous_revision(quest: Quest, revision: int) -> dict | None:
    """The failed fix of the revision before (after a rollback): its landed and deployed
    commits, the watch's verdict, summary and figures; None when it was never watched."""
    watch = Watch.objects.filter(
        workspace_id=quest.workspace_id, quest_id=quest.quest_id, revision=revision - 1
    ).first()
    return watch_evidence(watch) if watch is not None else None


def signal_facts(quest: Quest) -> SignalFacts:
    """The latest OTLP signal the quest took (its frames and message) and when the first one
    was seen; a quest no OTLP signal reached has no frames, only its title."""
    rows = IngestedSignal.objects.filter(
        workspace_id=quest.workspace_id, quest_id=quest.quest_id
    ).exclude(event=IngestedSignal.Event.MUTED)
    latest = rows.order_by("-received_at", "-pk").first()
    first = rows.order_by("received_at", "pk").values_list("received_at", flat=True).first()
    if latest is None:
        return SignalFacts(quest.fingerprint, "", quest.title, (), quest.created_at)
    frames = tuple(
        Frame(
            file=frame.get("file", ""),
            line=frame.get("line"),
            function=frame.get("function", ""),
            module=frame.get("module"),
            in_app=bool(frame.get("in_app")),
        )
        for frame in latest.frames
    )
    return SignalFacts(quest.fingerprint, latest.exception_type, latest.message, frames, first)


def earlier_quests(quest: Quest) -> tuple[EarlierQuest, ...]:
    rows = (
        Quest.objects.filter(workspace_id=quest.workspace_id, fingerprint=quest.fingerprint)
        .exclude(pk=quest.pk)
        .order_by("-created_at")[:20]
    )
    return tuple(
        EarlierQuest(
            quest_id=row.quest_id,
            state=row.state,
            revision=row.revision,
            landed_commit=row.data.get("landed_commit"),
            park_reason=row.park_reason or None,
        )
        for row in rows
    )


def refresh_mirror(workspace: Workspace) -> str | None:
    """Fetch the workspace's branches into its mirror, so a step sees what production runs;
    why it could not, or None. Not fatal: the step works on what the mirror has, and its
    evidence says so. Without ``--prune``: the quests' own branches (``ephyra/<quest>/r<rev>``)
    live there too."""
    if not workspace.remote:
        return None
    done = subprocess.run(
        [
            "git",
            "--git-dir",
            workspace.repository,
            "fetch",
            "--quiet",
            workspace.remote,
            "+refs/heads/*:refs/heads/*",
            "+refs/tags/*:refs/tags/*",
        ],
        capture_output=True,
        text=True,
        timeout=FETCH_SECONDS,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or ["no message"]
        return f"could not fetch {workspace.remote}: {last[0]}"
    return None


def head_commit(workspace: Workspace, quest: Quest) -> str:
    """The commit a step works at: the one production runs when the quest knows it, else the
    tip of the workspace's base branch in the mirror."""
    deployed = quest.data.get("deployed_commit")
    candidates = [deployed] if deployed else []
    candidates.append(f"refs/heads/{workspace.base_branch}")
    for name in candidates:
        if found := commit_of(workspace, name):
            return found
    raise EffectFailed(
        f"the mirror of {workspace.slug} has no commit for {' or '.join(candidates)}: "
        "is the base branch right?"
    )


def worktree(data_dir: Path, context: StepContext, commit: str) -> Worktree:
    try:
        return prepare_worktree(
            Path(context.workspace.repository),
            worktrees_root(data_dir, context.workspace),
            context.quest.quest_id,
            context.revision,
            commit,
        )
    except WorktreeError as exc:
        raise EffectFailed(str(exc)) from None


def worktrees_root(data_dir: Path, workspace: Workspace) -> Path:
    return Path(data_dir) / "worktrees" / workspace.slug


def artifacts_dir(data_dir: Path, context: StepContext, step: str, key: str) -> Path:
    """Where a step's runs leave their logs and records: one folder per delivery of the step
    (its ledger key and attempt), kept after the quest ends, as evidence."""
    safe_key = key.replace(":", "_")
    return (
        Path(data_dir)
        / "artifacts"
        / context.workspace.slug
        / context.quest.quest_id
        / f"r{context.revision}"
        / f"{step}-{safe_key}"
    )


def command_env(policy: AutonomyPolicy, extra: Mapping[str, str] = {}) -> dict[str, str]:
    """The variables the policy lets a command see, with the worker's values (none of
    Ephyra's own: the policy refuses those)."""
    env = {name: os.environ[name] for name in policy.work.env if name in os.environ}
    return {**env, **extra}


def workdir(
    tree: Worktree,
    artifacts: Path,
    runner: Runner,
    env: Mapping[str, str],
    cancelled: Callable[[], bool],
) -> Workdir:
    artifacts.mkdir(parents=True, exist_ok=True)
    return Workdir(
        worktree=tree.path, artifacts=artifacts, runner=runner, env=env, should_stop=cancelled
    )
