"""Regression probes: a landed quest's reproduction, run again by every later proof.

``register_regression_probe`` (asked by the machine when a quest lands) keeps the quest's
reproduction as a ``RegressionProbe``: the command, the test node ids, the failure it showed,
the fingerprint. Idempotent by the ledger key: a second delivery finds the probe there.

A proof's ``probe`` check runs the quest's own reproduction and every probe of the workspace
that still guards something: one of another quest that has not moved to a later revision since
(a rollback or a person's revision starts a new one, and its fix is no longer the one
registered).
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from ephyra.agent.reproduce import Reproduction
from ephyra.core.ports import EffectRequest, EffectResult
from quests.models import Quest, Workspace
from quests.workspaces import workspace_journal
from work.checks import Probe
from work.models import RegressionProbe

MAX_PROBES = 50  # a proof runs at most this many probes of earlier quests, the newest first


def reproduction_of(workspace: Workspace, quest_id: str) -> tuple[int, dict[str, Any]] | None:
    """The quest's latest recorded reproduction: (its revision, its evidence), or None."""
    journal = workspace_journal(workspace)
    for entry in reversed(journal.history(quest_id)):
        if entry.event.type != "reproduction_recorded":
            continue
        evidence = dict(getattr(entry.event, "evidence", {}) or {})
        found = evidence.get("reproduction")
        if isinstance(found, dict) and found.get("reproduced"):
            return int(entry.decision["revision"]), found
    return None


def rebuilt(label: str, evidence: dict[str, Any]) -> Probe:
    try:
        return Probe(label, Reproduction.from_evidence(evidence))
    except (KeyError, TypeError, ValueError) as exc:
        return Probe(label, None, f"its reproduction cannot be read: {exc}")


def probes_for(workspace: Workspace, quest_id: str) -> list[Probe]:
    """What a proof of ``quest_id`` runs: its own reproduction first (labelled with the
    quest's id), then the probes of other quests that still guard their fix."""
    found: list[Probe] = []
    own = reproduction_of(workspace, quest_id)
    if own is not None:
        found.append(rebuilt(f"{quest_id} (this quest's reproduction)", own[1]))
    rows = list(
        RegressionProbe.objects.filter(workspace=workspace)
        .exclude(quest_id=quest_id)
        .order_by("-created_at", "-pk")[:MAX_PROBES]
    )
    revisions = dict(
        Quest.objects.filter(
            workspace=workspace, quest_id__in={row.quest_id for row in rows}
        ).values_list("quest_id", "revision")
    )
    for row in rows:
        if revisions.get(row.quest_id, row.revision) != row.revision:
            continue  # its quest moved on: the fix this probe guarded was rolled back or redone
        label = f"{row.quest_id} r{row.revision} ({row.command[:200]})"
        found.append(rebuilt(label, row.reproduction))
    return found


class RegisterRegressionProbeAdapter:
    """``register_regression_probe``: keep the landed quest's reproduction as a probe."""

    def run(self, request: EffectRequest) -> EffectResult:
        workspace = Workspace.objects.get(slug=request.workspace)
        done = RegressionProbe.objects.filter(workspace=workspace, key=request.key).first()
        if done is not None:
            return EffectResult("succeeded", {"probe": done.pk, "again": True})
        found = reproduction_of(workspace, request.quest_id)
        if found is None:
            # A patch a person wrote without a reproduction: nothing to run again.
            return EffectResult("succeeded", {"probe": None, "why": "no reproduction recorded"})
        revision, evidence = found
        quest = Quest.objects.filter(workspace=workspace, quest_id=request.quest_id).first()
        fingerprint = str(request.payload.get("fingerprint") or (quest and quest.fingerprint))
        try:
            with transaction.atomic():
                probe = RegressionProbe.objects.create(
                    workspace=workspace,
                    quest_id=request.quest_id,
                    revision=quest.revision if quest is not None else revision,
                    key=request.key,
                    fingerprint=fingerprint[:200],
                    command=str(evidence.get("command") or request.payload.get("probe") or ""),
                    node_ids=list(evidence.get("node_ids", []))[:100],
                    reproduction=evidence,
                )
        except IntegrityError:  # delivered twice at once: the other delivery made it
            probe = RegressionProbe.objects.get(workspace=workspace, key=request.key)
        return EffectResult("succeeded", {"probe": probe.pk, "command": probe.command[:500]})

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None  # not a write outside Ephyra: delivered again after a crash
