"""``start_watch`` and the watch sweep: production observed after a fix landed.

The adapter opens the quest revision's ``Watch``: the window (from the deployment that carried
the landed commit out, or from the landing until one is seen, when the policy's watch starts at
landing), the fixed fingerprint and the files the patch changed. ``watches_sweep``, on the
worker's passes (at most every ``JUDGE_SECONDS`` a workspace), moves a window to the deployment
once the quest has seen one, counts (``work.watch_figures``) and judges
(``ephyra.policy.watch.judge_watch``): a regression is submitted as ``regression_observed`` at
once, before the window ends; a window that ends without one as ``watch_clean``; either with the
figures as evidence.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import pygit2
from django.db import transaction
from django.utils import timezone

from ephyra.core import events as ev
from ephyra.core.ports import EffectFailed, EffectRequest, EffectResult
from ephyra.core.states import State
from ephyra.policy.watch import WatchVerdict, judge_watch
from intake.grouping import patch_files
from ledger.inbound import submit_event
from quests.models import Quest, Workspace
from quests.workspaces import workspace_journal, workspace_policy_document
from work.watch_figures import watch_figures
from work.watch_models import Watch

log = logging.getLogger(__name__)
ACTOR = "ephyra:watch"
JUDGE_SECONDS = 5.0
MAX_FILES = 500  # the patched files kept on a watch; a patch wider than this is rare


class StartWatchAdapter:
    """``start_watch``: open (or move) the watch of the quest's revision."""

    def run(self, request: EffectRequest) -> EffectResult:
        workspace = Workspace.objects.get(slug=request.workspace)
        quest = Quest.objects.filter(workspace=workspace, quest_id=request.quest_id).first()
        if quest is None:
            raise EffectFailed(f"no quest {request.quest_id} in {workspace.slug}")
        data = quest.data
        payload = request.payload
        landed = payload.get("commit") or data.get("landed_commit")
        if not landed:
            raise EffectFailed("start_watch names no landed commit")
        minutes = int(payload.get("minutes") or 30)
        deployed_at = _time(payload.get("since")) or _time(data.get("deployed_at"))
        since = deployed_at or _landed_at(workspace, quest) or timezone.now()
        watch, created = Watch.objects.get_or_create(
            workspace=workspace,
            quest_id=quest.quest_id,
            revision=quest.revision,
            defaults={
                "fingerprint": quest.fingerprint,
                "landed_commit": landed,
                "deployed_commit": payload.get("deployed") or data.get("deployed_commit") or "",
                "environment": payload.get("environment") or data.get("deployed_to") or "",
                "files": _files(workspace, data),
                "minutes": minutes,
                "since": since,
                "ends_at": since + timedelta(minutes=minutes),
            },
        )
        if not created and watch.state == Watch.State.ENDED:
            # Asked again on resume: the quest watches again, in the window it had.
            watch.state = Watch.State.OPEN
            watch.save(update_fields=["state"])
        if not created and deployed_at is not None and not watch.deployed_commit:
            _move(watch, data)
        return EffectResult(
            "succeeded",
            {
                "watch": watch.pk,
                "since": watch.since.isoformat(),
                "ends_at": watch.ends_at.isoformat(),
                "files": len(watch.files),
                "deployed": watch.deployed_commit or None,
            },
        )

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None  # a computation: delivered again after a crash, never ambiguous


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def _landed_at(workspace: Workspace, quest: Quest) -> datetime | None:
    """When the revision landed, as its journal says."""
    for entry in reversed(workspace_journal(workspace).history(quest.quest_id)):
        if entry.event.type == "landed" and entry.decision.get("revision") == quest.revision:
            return entry.event.at
    return None


def _files(workspace: Workspace, data: dict) -> list[str]:
    head = data.get("patch_head")
    if not head:
        return []
    try:
        repo = pygit2.Repository(workspace.repository)
    except pygit2.GitError:
        return []
    return sorted(patch_files(repo, data.get("base"), head))[:MAX_FILES]


def _move(watch: Watch, data: dict) -> None:
    """The quest has seen the deployment: the window starts there now."""
    since = _time(data.get("deployed_at"))
    if since is None:
        return
    watch.since = since
    watch.ends_at = since + timedelta(minutes=watch.minutes)
    watch.deployed_commit = data.get("deployed_commit") or ""
    watch.environment = data.get("deployed_to") or ""
    watch.save(update_fields=["since", "ends_at", "deployed_commit", "environment"])
    log.info("watch of %s moved to the deployment at %s", watch.quest_id, since)


def watches_sweep(workspace: Workspace, now: datetime | None = None) -> int:
    """Judge the workspace's open watches; how many concluded (their events are submitted)."""
    watches = list(Watch.objects.filter(workspace=workspace, state=Watch.State.OPEN))
    if not watches:
        return 0
    now = now or timezone.now()
    quests = {
        row["quest_id"]: row
        for row in Quest.objects.filter(
            workspace=workspace, quest_id__in=[w.quest_id for w in watches]
        ).values("quest_id", "state", "revision", "data")
    }
    policy = workspace_policy_document(workspace).watch
    concluded = 0
    for watch in watches:
        quest = quests.get(watch.quest_id)
        if quest is None or quest["state"] != State.WATCHING or quest["revision"] != watch.revision:
            watch.state = Watch.State.ENDED
            watch.save(update_fields=["state"])
            continue
        if quest["data"].get("deployed_at") and not watch.deployed_commit:
            _move(watch, quest["data"])
        concluded += _judge(workspace, watch, policy, now)
    return concluded


def _judge(workspace: Workspace, watch: Watch, policy, now: datetime) -> int:
    figures = watch_figures(watch, now)
    verdict, why = judge_watch(figures, policy, window_over=now >= watch.ends_at)
    watch.figures = figures.to_evidence()
    watch.judged_at = now
    if verdict is WatchVerdict.UNDECIDED:
        watch.save(update_fields=["figures", "judged_at"])
        return 0
    kind = ev.WatchClean if verdict is WatchVerdict.CLEAN else ev.RegressionObserved
    watch.state = Watch.State(verdict.value)
    watch.summary = why
    event = kind(
        id=f"watch-{watch.pk}-{verdict}",
        quest=watch.quest_id,
        at=now,
        actor=ACTOR,
        summary=why,
        evidence=watch_evidence(watch),
    )
    with transaction.atomic():
        submit_event(workspace, event, source="watch")
        watch.save(update_fields=["state", "summary", "figures", "judged_at"])
    log.info("watch of %s r%s: %s (%s)", watch.quest_id, watch.revision, verdict, why)
    return 1


def watch_evidence(watch: Watch) -> dict[str, Any]:
    """What a watch saw, as a quest event's evidence and the next research's input."""
    return {
        "revision": watch.revision,
        "landed": watch.landed_commit,
        "deployed": watch.deployed_commit or None,
        "environment": watch.environment or None,
        "since": watch.since.isoformat(),
        "ends_at": watch.ends_at.isoformat(),
        "minutes": watch.minutes,
        "fingerprint": watch.fingerprint,
        "files": list(watch.files[:50]),
        "figures": dict(watch.figures),
        "verdict": watch.state if watch.state != Watch.State.OPEN else None,
        "summary": watch.summary or None,
    }
