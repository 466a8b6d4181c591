"""The patch a revert cannot write, asked of the coding agent the policy names.

The task names the quest, the culprit or the conflict; the evidence is what the earlier steps
found; every text from outside (the signal's message and stack, the culprit's message, the
quest's comments) goes into a fenced block labelled as untrusted data (``ephyra.agent.prompt``).
The agent's diff on the revision's branch is what counts (``ephyra.agent.contract``); the tests
the reproduction runs are protected. Without an agent, a person writes the patch: the quest
parks with the reason.
"""

from __future__ import annotations

from typing import Any

from ephyra.agent import Conflict
from ephyra.agent.contract import run_agent
from ephyra.agent.prompt import PromptRefused, build_prompt
from ephyra.core import events as ev


def patch_with_agent(
    ctx, workdir, tree, request, found: dict[str, Any], *, conflict: Conflict | None
):
    """``patch_recorded`` with the agent's commit, or ``patch_failed`` with why not; a
    ``usage_recorded`` for what the agent reported spending."""
    agent = ctx.policy.agent
    if agent is None:
        reason = "no_culprit" if conflict is None else "revert_conflict"
        detail = (
            "No culprit was located and no coding agent is configured: a person writes the patch."
            if conflict is None
            else conflict.summary()
        )
        files = () if conflict is None else conflict.files[:100]
        evidence = {} if conflict is None else conflict.to_evidence()
        fields = {"reason": reason, "detail": detail, "files": files, "evidence": evidence}
        return {"patched": False}, [(ev.PatchFailed, fields)]
    if conflict is None:
        task = (
            f"Quest {ctx.quest.quest_id}: fix the failure the reproduction below shows. No single "
            "commit could be reverted. Change the code, not the tests that reproduce it."
        )
    else:
        task = (
            f"Quest {ctx.quest.quest_id}: reverting commit {conflict.culprit[:12]} conflicts in "
            f"{', '.join(conflict.files[:20])}. Undo what that commit broke, keeping what later "
            "commits built on it. Change the code, not the tests that reproduce it."
        )
    untrusted = [("signal message", ctx.signal.message)]
    untrusted += [("stack frame", frame.describe()) for frame in ctx.signal.frames[:30]]
    reproduction = found.get("reproduction", {})
    try:
        prompt = build_prompt(task, found, untrusted)
    except PromptRefused as exc:
        return {"patched": False}, [
            (ev.PatchFailed, {"reason": "prompt_refused", "detail": exc.reason, "evidence": {}})
        ]
    protected = [node.split("::", 1)[0] for node in reproduction.get("node_ids", [])]
    result = run_agent(workdir, agent, prompt, base=tree.base, protected=protected)
    events: list = []
    if result.usage.reported or result.usage.seconds:
        events.append(
            (
                ev.UsageRecorded,
                {
                    "source": "agent",
                    "tokens": result.usage.tokens,
                    "cost_micros": result.usage.cost_micros,
                    "runner_seconds": int(result.usage.seconds),
                },
            )
        )
    if result.ok and result.head:
        events.append(
            (
                ev.PatchRecorded,
                {"head": result.head, "base": tree.base, "evidence": result.to_evidence()},
            )
        )
        return {"patched": True, "head": result.head, "agent": True}, events
    refusal = result.refusal
    events.append(
        (
            ev.PatchFailed,
            {
                "reason": refusal.reason if refusal else "agent_failed",
                "detail": result.summary(),
                "files": (refusal.files if refusal else ())[:100],
                "evidence": result.to_evidence(),
            },
        )
    )
    return {"patched": False, "agent": True}, events
