"""Effect adapters for the writes to a workspace's Git remote (``ephyra/compose.py`` registers
them): ``land``, ``rebase`` and ``rollback``.

Each feeds its outcome back as one event, with an id derived from the ledger key, so a second
feeding after a crash is a redelivery. A write that got no answer from the remote raises, so
the ledger marks it ambiguous; its ``check`` then asks the remote whether the commit the
operation prepared (kept in the mirror under ``prepared_ref(key)`` before the push) is on the
base: ``succeeded`` with the event, ``absent`` (deliver it again: the compare-and-swap makes
that safe), or None when the remote cannot be read (a person decides).

Credentials come from git's own helper, or from the file the setting
``EPHYRA_GIT_CREDENTIALS_FILE`` names (handed in by the composition root); never from the
database, and nothing here writes one anywhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pygit2
from django.utils import timezone

from ephyra.core import events as ev
from ephyra.core.effects import parse_effect_key
from ephyra.core.ports import ClaimLost, EffectRequest, EffectResult, outcome_event_id
from ephyra.landing import (
    BaseMoved,
    Conflict,
    NoAnswer,
    Rebased,
    RebaseError,
    Refused,
    RolledBack,
    fetch_base,
    land,
    landed_on,
    prepared_ref,
    rebase,
    rollback,
)
from ephyra.redaction.redact import redact
from ephyra.runner.worktrees import branch_name, worktree_path
from quests.models import Quest, Workspace
from quests.workspaces import workspace_policy_document

ACTOR = "ephyra:landing"
# A rollback whose base moves between its read and its push reads it again, this many times:
# each lost lease wrote nothing, so trying again is not a blind retry.
ROLLBACK_TRIES = 3
_TEXT = 4000  # the longest detail an event carries


class _RemoteAdapter:
    def __init__(self, data_dir: Path, git_credentials_file: Path | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.credentials = git_credentials_file

    def _check_sent(
        self, request: EffectRequest, found: Callable[[str], ev.BaseEvent]
    ) -> EffectResult | None:
        """The check of a write that may have been pushed: is the commit it prepared on the
        remote's base?"""
        ws = Workspace.objects.get(slug=request.workspace)
        ref = prepared_ref(request.key)
        repo = pygit2.Repository(ws.repository)
        if ref not in repo.references:
            # The ref is written before anything is sent: without it, nothing was.
            return EffectResult("absent", {"checked": "nothing was prepared, so nothing sent"})
        commit = str(repo.references[ref].target)
        on = landed_on(
            ws.repository,
            ws.remote,
            base_branch=ws.base_branch,
            commit=commit,
            credentials=self.credentials,
        )
        if on is None:
            return None
        if not on:
            return EffectResult("absent", {"checked": f"{commit} is not on {ws.base_branch}"})
        return EffectResult("succeeded", {"commit": commit, "checked": True}, (found(commit),))


def _event(cls: type[ev.BaseEvent], request: EffectRequest, **fields: Any) -> ev.BaseEvent:
    return cls(
        id=outcome_event_id(request.key, 0),
        quest=request.quest_id,
        at=timezone.now(),
        actor=ACTOR,
        **fields,
    )


def _failed(
    cls: type[ev.BaseEvent], request: EffectRequest, reason: str, detail: str, files=()
) -> EffectResult:
    detail = redact(detail)[:_TEXT]
    event = _event(cls, request, reason=reason, detail=detail, files=tuple(files))
    return EffectResult("failed", {"reason": reason, "detail": detail}, (event,))


def _claim_held(request: EffectRequest) -> Callable[[], None]:
    """Asked right before a push leaves: a worker that lost its claim sends nothing."""

    def check() -> None:
        if not request.still_holder():
            raise ClaimLost(request.key)

    return check


class LandAdapter(_RemoteAdapter):
    """``land``: the approved head onto the workspace's base branch, in the policy's landing
    style, with a compare-and-swap on the base the patch was proven on. ``landed`` when it
    is there; ``base_moved`` when the base is another commit now (the machine rebases and
    proves again); ``landing_failed`` when it cannot land as the policy allows, the remote
    refused it, or the remote could not be read before anything was sent."""

    def run(self, request: EffectRequest) -> EffectResult:
        ws = Workspace.objects.select_related("policy").get(slug=request.workspace)
        if not ws.remote:
            return _failed(ev.LandingFailed, request, "no_remote", "the workspace has no remote")
        revision = parse_effect_key(request.key).revision
        payload = request.payload
        try:
            result = land(
                ws.repository,
                ws.remote,
                base_branch=ws.base_branch,
                expected_base=payload["base"],
                head=payload["head"],
                styles=workspace_policy_document(ws).landing.styles(),
                trailers={
                    "Ephyra-Quest": request.quest_id,
                    "Ephyra-Revision": str(revision),
                    "Ephyra-Proof": payload["proof"],
                },
                source=branch_name(request.quest_id, revision),
                prepared_ref=prepared_ref(request.key),
                credentials=self.credentials,
                before_send=_claim_held(request),
            )
        except NoAnswer as exc:
            if exc.sent:
                raise  # pushed, no answer: ambiguous, for check to settle
            return _failed(ev.LandingFailed, request, "remote_unreachable", str(exc))
        if isinstance(result, Refused):
            return _failed(ev.LandingFailed, request, result.reason, result.detail, result.files)
        if isinstance(result, BaseMoved):
            moved = _event(ev.BaseMoved, request, base=result.base)
            return EffectResult("failed", {"base_moved": result.base}, (moved,))
        detail = {"commit": result.commit, "style": result.style, "already": result.already}
        landed = _event(ev.Landed, request, commit=result.commit)
        return EffectResult("succeeded", detail, (landed,))

    def check(self, request: EffectRequest) -> EffectResult | None:
        return self._check_sent(request, lambda c: _event(ev.Landed, request, commit=c))


class RebaseAdapter(_RemoteAdapter):
    """``rebase``: the quest's patch branch (``ephyra/<quest>/r<revision>``) replayed onto the
    moved base, in the mirror; the revision's worktree follows when it exists. A rebased patch
    is a new patch on the new base: ``patch_recorded`` (the machine proves it again). A
    conflict parks the quest: ``patch_failed`` with ``rebase_conflict`` and the files."""

    def run(self, request: EffectRequest) -> EffectResult:
        ws = Workspace.objects.get(slug=request.workspace)
        revision = parse_effect_key(request.key).revision
        onto, head = request.payload["onto"], request.payload["head"]
        repo = pygit2.Repository(ws.repository)
        if pygit2.Oid(hex=onto) not in repo and ws.remote:
            # A base move a forge reported: the mirror may not have fetched it yet.
            with contextlib.suppress(NoAnswer):  # then the rebase says the commit is missing
                fetch_base(ws.repository, ws.remote, ws.base_branch, credentials=self.credentials)
        worktree = worktree_path(self.data_dir / "worktrees", request.quest_id, revision)
        try:
            result = rebase(
                ws.repository,
                branch_name(request.quest_id, revision),
                onto=onto,
                head=head,
                worktree=worktree if worktree.is_dir() else None,
            )
        except RebaseError as exc:
            return _failed(ev.PatchFailed, request, "rebase_failed", str(exc))
        if isinstance(result, Conflict):
            return _failed(ev.PatchFailed, request, "rebase_conflict", result.detail, result.files)
        return self._rebased(request, result)

    def _rebased(self, request: EffectRequest, result: Rebased) -> EffectResult:
        event = _event(ev.PatchRecorded, request, head=result.head, base=result.base)
        return EffectResult("succeeded", {"head": result.head, "base": result.base}, (event,))

    def check(self, request: EffectRequest) -> EffectResult | None:
        """The rebase only moves a branch of the mirror: rebased when the branch holds a
        patch on the new base; not done when it is still the old head."""
        ws = Workspace.objects.get(slug=request.workspace)
        revision = parse_effect_key(request.key).revision
        repo = pygit2.Repository(ws.repository)
        ref = f"refs/heads/{branch_name(request.quest_id, revision)}"
        onto, head = request.payload["onto"], request.payload["head"]
        if ref not in repo.references or pygit2.Oid(hex=onto) not in repo:
            return None
        tip = repo.references[ref].target
        if str(tip) == head:
            return EffectResult("absent", {"checked": f"the branch is still at {head}"})
        if tip != pygit2.Oid(hex=onto) and repo.descendant_of(tip, pygit2.Oid(hex=onto)):
            return self._rebased(request, Rebased(str(tip), onto))
        return None


class RollbackAdapter(_RemoteAdapter):
    """``rollback``: one revert of the landed patch on the base as it is now, pushed with a
    compare-and-swap. ``rollback_confirmed`` with the revert commit (or with none, when the
    base no longer carries the change); ``rollback_failed`` when the revert conflicts (the
    quest parks for a person, with the files), the remote refused it, or the base kept moving
    under it."""

    def run(self, request: EffectRequest) -> EffectResult:
        ws = Workspace.objects.get(slug=request.workspace)
        if not ws.remote:
            return _failed(ev.RollbackFailed, request, "no_remote", "the workspace has no remote")
        revision = parse_effect_key(request.key).revision
        quest = Quest.objects.get(workspace=ws, quest_id=request.quest_id)
        options = {
            "base_branch": ws.base_branch,
            "landed_commit": request.payload["commit"],
            # The base the patch landed on: the revert undoes the whole patch from there.
            "patch_base": quest.data.get("base"),
            "trailers": {"Ephyra-Quest": request.quest_id, "Ephyra-Revision": str(revision)},
            "prepared_ref": prepared_ref(request.key),
            "credentials": self.credentials,
            "before_send": _claim_held(request),
        }
        try:
            for _ in range(ROLLBACK_TRIES):
                result = rollback(ws.repository, ws.remote, **options)
                if not isinstance(result, BaseMoved):
                    break
        except NoAnswer as exc:
            if exc.sent:
                raise
            return _failed(ev.RollbackFailed, request, "remote_unreachable", str(exc))
        if isinstance(result, BaseMoved):
            detail = f"the base moved {ROLLBACK_TRIES} times while the revert was pushed"
            return _failed(ev.RollbackFailed, request, "base_kept_moving", detail)
        if isinstance(result, Conflict):
            reason, detail = "rollback_conflict", result.detail
            return _failed(ev.RollbackFailed, request, reason, detail, result.files)
        if isinstance(result, Refused):
            return _failed(ev.RollbackFailed, request, result.reason, result.detail, result.files)
        return self._confirmed(request, result)

    def _confirmed(self, request: EffectRequest, result: RolledBack) -> EffectResult:
        event = _event(ev.RollbackConfirmed, request, commit=result.revert_commit)
        detail = {"revert_commit": result.revert_commit, "already": result.already}
        return EffectResult("succeeded", detail, (event,))

    def check(self, request: EffectRequest) -> EffectResult | None:
        return self._check_sent(request, lambda c: _event(ev.RollbackConfirmed, request, commit=c))
