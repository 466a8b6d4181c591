"""``start_agent``: a quest's agent step (research, reproduce, patch) as a job of the worker.

Each step gathers what it needs (``work.context``), prepares the quest revision's worktree, runs
the step of ``ephyra.agent`` through the runner the policy names, seals the runs' artifacts
(redacted, ``work.artifacts``) and answers with the events its outcome feeds back, their ids
derived from the ledger key so a second feeding after a crash is a redelivery:

- ``research`` → ``research_started`` (when the quest is still ``triaged``: an automatic route
  asks for research at triage) and ``hypothesis_written`` with the research as evidence;
- ``reproduce`` → the reproduction, then the last good commit and a bisect to the culprit →
  ``reproduction_recorded`` (its plan names the culprit) or ``reproduction_failed``;
- ``patch`` → the revert of the culprit the reproduction named, on the revision's branch →
  ``patch_recorded``; a revert that conflicts goes to the coding agent when the policy names
  one, else ``patch_failed(revert_conflict)`` with the conflicting files.

A step stopped (``stop_agent``, a lost lease) answers ``failed`` with ``stopped``, feeding
nothing. A runner that cannot run (no bubblewrap for ``runner: sandbox``) fails the operation
with the reason; it never falls back to another runner.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.utils import timezone

from ephyra.agent import (
    Conflict,
    GitError,
    LocateError,
    RevertError,
    Stopped,
    bisect,
    known_good,
    research,
    revert,
)
from ephyra.agent.reproduce import Reproduction, reproduce
from ephyra.core import events as ev
from ephyra.core.ports import (
    EffectFailed,
    EffectRequest,
    EffectResult,
    Runner,
    RunnerUnavailable,
    outcome_event_id,
)
from ephyra.core.states import State
from quests.workspaces import workspace_journal
from work import artifacts, context
from work.agent import patch_with_agent

log = logging.getLogger(__name__)
ACTOR = "ephyra:agent"


class StartAgentAdapter:
    """``start_agent``: run the step its payload names (see the module's docstring)."""

    runs_long = True  # a job of the worker (worker/jobs.py), not a step of its loop

    def __init__(self, *, data_dir: Path, runners: Mapping[str, Runner]) -> None:
        self.data_dir = Path(data_dir)
        self.runners = runners

    def run(self, request: EffectRequest) -> EffectResult:
        step = request.payload.get("step")
        if step not in STEPS:
            raise EffectFailed(f"no agent step {step!r}: research, reproduce or patch")
        ctx = context.gather(request)
        runner = self.runners[ctx.policy.work.runner]
        tree = context.worktree(self.data_dir, ctx, ctx.head)
        folder = context.artifacts_dir(self.data_dir, ctx, step, request.key)
        workdir = context.workdir(
            tree, folder, runner, context.command_env(ctx.policy), request.cancelled
        )
        try:
            detail, events = STEPS[step](ctx, workdir, tree, request)
        except Stopped:
            return EffectResult("failed", {"stopped": True, "step": step})
        except RunnerUnavailable as exc:
            raise EffectFailed(str(exc)) from None
        except (GitError, LocateError, RevertError) as exc:
            raise EffectFailed(f"{step}: {exc}") from None
        finally:
            runs = artifacts.seal(folder)
        detail |= {"step": step, "artifacts": str(folder), "runs": len(runs)}
        if ctx.fetch_problem:
            detail["fetch"] = ctx.fetch_problem
        return EffectResult("succeeded", detail, tuple(_ided(events, request)))

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None  # a computation: delivered again after a crash, never ambiguous


def _ided(events: list[tuple[type[ev.BaseEvent], dict[str, Any]]], request: EffectRequest):
    at = timezone.now()
    for index, (kind, fields) in enumerate(events):
        yield kind(
            id=outcome_event_id(request.key, index),
            quest=request.quest_id,
            at=at,
            actor=ACTOR,
            **fields,
        )


def _research(ctx, workdir, tree, request):
    found = research(
        workdir,
        ctx.signal,
        head=ctx.head,
        known_good=ctx.policy.work.known_good,
        earlier=list(ctx.earlier),
        work=ctx.policy.work,
    )
    events = []
    if ctx.quest.state == State.TRIAGED:
        events.append((ev.ResearchStarted, {}))
    evidence = found.to_evidence()
    summary = found.summary()
    if ctx.previous is not None:
        # After a rollback: the next research starts from what the failed fix did.
        evidence["previous_revision"] = ctx.previous
        previous = ctx.previous
        ended = "was rolled back" if previous["verdict"] == "regression" else "was watched"
        summary = (
            f"Revision {previous['revision']} landed {previous['landed']} and {ended}: "
            f"{previous['summary']}\n{summary}"
        )[:4000]
    events.append((ev.HypothesisWritten, {"summary": summary, "evidence": evidence}))
    return {"head": ctx.head}, events


def _reproduce(ctx, workdir, tree, request):
    work = ctx.policy.work
    seen = reproduce(workdir, work, ctx.signal, head=ctx.head)
    if not isinstance(seen, Reproduction):
        evidence = {"reproduction": seen.to_evidence()}
        return {"reproduced": False}, [
            (ev.ReproductionFailed, {"reason": seen.summary(), "evidence": evidence})
        ]
    good = known_good(workdir, work, seen, head=ctx.head, deployed_before=None)
    evidence: dict[str, Any] = {
        "reproduction": seen.to_evidence(),
        "known_good": good.to_evidence(),
    }
    if good.commit is None:
        plan = (
            f"{good.summary()}\nNo culprit was located: a person or a coding agent writes the "
            "patch."
        )
        culprit = None
    else:
        location = bisect(workdir, work, seen, good=good.commit, bad=good.bad, signal=ctx.signal)
        evidence["location"] = location.to_evidence()
        culprit = location.culprit
        plan = location.summary()
        if culprit is not None:
            plan = f"{location.plan()}\n{plan}"
    evidence["culprit"] = None if culprit is None else culprit.sha
    evidence["culprit_is_merge"] = bool(culprit is not None and culprit.is_merge)
    return {"reproduced": True, "culprit": evidence["culprit"]}, [
        (
            ev.ReproductionRecorded,
            {"probe": seen.command, "plan": plan[:4000], "evidence": evidence},
        )
    ]


def _patch(ctx, workdir, tree, request):
    found = latest_evidence(ctx, "reproduction_recorded")
    culprit = found.get("culprit")
    if not culprit:
        return patch_with_agent(ctx, workdir, tree, request, found, conflict=None)
    mainline = 1 if found.get("culprit_is_merge") else None
    made = revert(workdir, culprit, mainline=mainline)
    if isinstance(made, Conflict):
        if ctx.policy.agent is not None and made.reason == "conflict":
            return patch_with_agent(ctx, workdir, tree, request, found, conflict=made)
        reason = "revert_conflict" if made.reason == "conflict" else "revert_empty"
        return {"patched": False}, [
            (
                ev.PatchFailed,
                {
                    "reason": reason,
                    "detail": made.summary(),
                    "files": made.files[:100],
                    "evidence": made.to_evidence(),
                },
            )
        ]
    return {"patched": True, "head": made.head}, [
        (ev.PatchRecorded, {"head": made.head, "base": made.base, "evidence": made.to_evidence()})
    ]


def latest_evidence(ctx, event_type: str) -> dict[str, Any]:
    """The evidence of the quest's latest journaled event of ``event_type`` at its revision
    (the reproduction that named a culprit, for the patch step)."""
    journal = workspace_journal(ctx.workspace)
    for entry in reversed(journal.history(ctx.quest.quest_id)):
        if entry.event.type == event_type and entry.decision["revision"] == ctx.revision:
            return dict(getattr(entry.event, "evidence", {}) or {})
    return {}


STEPS = {"research": _research, "reproduce": _reproduce, "patch": _patch}
