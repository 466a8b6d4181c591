"""The machine's handlers for work that could not be done and waits for a person: a patch
that could not be written, a landing or a rollback the remote did not take. Each parks the
quest with the reason as its park reason and tells the inbox, with the files involved.

Handlers in the shape of ``ephyra.core.lifecycle``'s; docs/lifecycle.md documents the events.
"""

from __future__ import annotations

from typing import Any

from ephyra.core import events as ev
from ephyra.core.effects import EffectType
from ephyra.core.forge_reports import Outcome, Spec
from ephyra.core.quest import Quest
from ephyra.core.rules import MachinePolicy
from ephyra.core.states import State

S = State
E = EffectType


def parked_for_a_person(
    e: ev.PatchFailed | ev.LandingFailed | ev.RollbackFailed, resume: State
) -> tuple[dict[str, Any], list[Spec]]:
    return (
        {"state": S.PARKED, "resume_state": resume, "park_reason": e.reason},
        [(E.NOTIFY_INBOX, {"reason": e.reason, "detail": e.detail, "files": list(e.files)})],
    )


def patch_failed(q: Quest, e: ev.PatchFailed, p: MachinePolicy) -> Outcome:
    if q.state is not S.PATCHING:
        return f"only a quest that is patching can fail to patch; the quest is {q.state}"
    return parked_for_a_person(e, S.PATCHING)


def landing_failed(q: Quest, e: ev.LandingFailed, p: MachinePolicy) -> Outcome:
    if q.state is not S.LANDING:
        return f"only a landing quest can fail to land; the quest is {q.state}"
    # Nothing was written. Resuming goes back to C: approving again asks for land again, once
    # a person has fixed what stopped it (credentials, branch protection, a conflict).
    changes, specs = parked_for_a_person(e, S.READY)
    return changes | {"approval_c": None}, specs


def rollback_failed(q: Quest, e: ev.RollbackFailed, p: MachinePolicy) -> Outcome:
    if q.state is not S.ROLLED_BACK:
        return f"only a quest being rolled back can fail to roll back; the quest is {q.state}"
    # Resuming asks for the rollback again (``_work_for``): after a person reverted by hand,
    # the adapter finds nothing left to revert and confirms.
    return parked_for_a_person(e, S.ROLLED_BACK)
