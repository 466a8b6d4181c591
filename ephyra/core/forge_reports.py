"""The machine's handlers for what the forge reports about a quest's commits: deployments that
carry a landed commit out (and open the watch window), and CI check results on a patch head
(which can hold checkpoint C).

Handlers in the shape of ``ephyra.core.lifecycle``'s; docs/lifecycle.md documents both events.
"""

from __future__ import annotations

from typing import Any

from ephyra.core import events as ev
from ephyra.core.effects import EffectType
from ephyra.core.quest import Quest
from ephyra.core.rules import MachinePolicy, WatchStart
from ephyra.core.states import State

S = State
E = EffectType
Spec = tuple[EffectType, dict[str, Any]]
Outcome = str | tuple[dict[str, Any], list[Spec]]


def watch_started(q: Quest, p: MachinePolicy) -> bool:
    """Whether the watch window of a watching quest has opened (see ``WatchStart``)."""
    return p.watch_from is WatchStart.LANDING or q.deployed_commit is not None


def start_watch(q: Quest, p: MachinePolicy) -> Spec:
    payload: dict[str, Any] = {"commit": q.landed_commit, "minutes": p.watch_minutes}
    if q.deployed_commit is not None:
        payload |= {
            "deployed": q.deployed_commit,
            "environment": q.deployed_to,
            "since": q.deployed_at.isoformat() if q.deployed_at else None,
        }
    return E.START_WATCH, payload


def required_failing(q: Quest, p: MachinePolicy) -> list[str]:
    """The policy's required checks that the forge's CI reported failed on the patch head."""
    if q.checks_head is None or q.checks_head != q.patch_head:
        return []
    required = p.required_checks.get(q.risk or "", ())
    return [name for name in q.failing_checks if name in required]


def deployment_observed(q: Quest, e: ev.DeploymentObserved, p: MachinePolicy) -> Outcome:
    if q.state is not S.WATCHING:
        return f"a deployment is observed for a landed quest; the quest is {q.state}"
    if e.includes != q.landed_commit:
        return f"the deployment includes {e.includes}, not the landed commit {q.landed_commit}"
    if q.deployed_commit is not None:
        return f"the watch already follows the deployment of {q.deployed_commit} to {q.deployed_to}"
    changes: dict[str, Any] = {
        "deployed_commit": e.commit,
        "deployed_to": e.environment,
        "deployed_at": e.at,
    }
    if p.watch_from is WatchStart.LANDING:
        return changes, []  # the window has been open since landing; the deployment is noted
    return changes, [start_watch(q.evolve(changes), p)]


# A patch whose checks still decide something: it is proven, awaits C, or is being landed
# (also while held in review or parked). In patching a new head is on its way.
_CHECKED = frozenset({S.PROVING, S.READY, S.LANDING, S.HANDED_OFF, S.PARKED})


def checks_reported(q: Quest, e: ev.ChecksReported, p: MachinePolicy) -> Outcome:
    if q.patch_head is None:
        return "no patch is recorded; checks are reported on a patch head"
    if q.landed_commit is not None:
        return f"the patch has landed; its checks decide nothing now (the quest is {q.state})"
    if q.state not in _CHECKED:
        return f"checks decide something once a patch is proving; the quest is {q.state}"
    if e.head != q.patch_head:
        return f"the checks are for {e.head}, not the patch head {q.patch_head}"
    earlier = q.failing_checks if q.checks_head == e.head else ()
    failing = set(earlier)
    for check in e.checks:  # in order: the last result of a name counts
        if check.passed:
            failing.discard(check.name)
        else:
            failing.add(check.name)
    changes: dict[str, Any] = {"checks_head": e.head, "failing_checks": tuple(sorted(failing))}
    new = sorted(failing - set(earlier))
    if not new:
        return changes, []
    required = set(p.required_checks.get(q.risk or "", ()))
    detail = {
        "reason": "forge_check_failed",
        "head": e.head,
        "checks": new,
        "required": sorted(required.intersection(new)),
        "state": str(q.state),
    }
    return changes, [(E.NOTIFY_INBOX, detail)]
