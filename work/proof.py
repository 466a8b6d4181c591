"""``run_proof``: the proof bundle for the recorded head on the recorded base, as a job of the
worker.

In the quest revision's worktree, checked out at exactly the recorded head (clean: no change to
a tracked file, no untracked file), after the workspace's setup, it runs the checks the
policy's proof matrix names for the quest's risk (``work.checks``) through the runner the policy
names. The runs' outputs are sealed (redacted, ``work.artifacts``) and each check in the bundle
names its output by the SHA-256 of the stored file. The bundle is bound to the quest, revision,
risk, base and head and carries its canonical SHA-256 digest; it answers ``proof_completed``
when every check counts as passed, else ``proof_failed`` naming the checks that did not.

A proof asked for a revision, head or base the quest no longer has (a person's revision, a base
that moved) is not run, and one that finds so when it ends answers nothing: the outcome is
``failed`` with ``stale``, which the ledger never delivers again. Were its event fed back
anyway, the machine refuses it, since the bundle names what it was made for.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Any

from django.utils import timezone

from ephyra.agent import GitError, Stopped
from ephyra.agent.prepare import prepare
from ephyra.core import events as ev
from ephyra.core.ports import (
    EffectFailed,
    EffectRequest,
    EffectResult,
    Runner,
    RunnerUnavailable,
    outcome_event_id,
)
from ephyra.core.proof import CheckResult, ProofBundle
from quests.models import Quest
from work import artifacts, context
from work.checks import CheckOutcome, Checks
from work.probes import probes_for

log = logging.getLogger(__name__)
ACTOR = "ephyra:proof"
EXCERPT = 2000  # characters of a check's output kept in the bundle (its end: where failures are)


class RunProofAdapter:
    runs_long = True  # a job of the worker (worker/jobs.py), not a step of its loop

    def __init__(self, *, data_dir: Path, runners: dict[str, Runner]) -> None:
        self.data_dir = Path(data_dir)
        self.runners = runners

    def run(self, request: EffectRequest) -> EffectResult:
        asked = _asked(request)
        quest = Quest.objects.filter(
            workspace__slug=request.workspace, quest_id=request.quest_id
        ).first()
        stale = _stale(quest, asked)
        if stale:
            return EffectResult("failed", {"stale": stale})
        ctx = context.gather(request)
        risk = ctx.quest.risk
        if not risk:
            raise EffectFailed("the quest has no risk: triage sets it before a proof")
        names = list(ctx.policy.proof.matrix.get(risk, []))
        runner_name = ctx.policy.work.runner
        runner = self.runners[runner_name]
        tree = context.worktree(self.data_dir, ctx, asked["head"])
        # A folder per delivery: one delivered again after a crash must not find the earlier
        # one's runs sealed (``artifacts.seal`` would leave its own unredacted).
        folder = context.artifacts_dir(
            self.data_dir, ctx, "proof", f"{request.key}-{request.attempt}"
        )
        workdir = context.workdir(
            tree, folder, runner, context.command_env(ctx.policy), request.cancelled
        )
        outcomes: list[CheckOutcome] = []
        setup_problem = ""
        try:
            ready = prepare(workdir, ctx.policy.work, asked["head"], name="proof-prepare")
            _exactly(tree.path, asked["head"])
            if not ready.ok:
                setup_problem = ready.summary()
            else:
                checks = Checks(
                    workdir,
                    ctx.policy,
                    head=asked["head"],
                    base=asked["base"],
                    probes=lambda: probes_for(ctx.workspace, ctx.quest.quest_id),
                )
                outcomes = [checks.run(name) for name in names]
        except Stopped:
            return EffectResult("failed", {"stopped": True, "step": "proof"})
        except RunnerUnavailable as exc:
            raise EffectFailed(str(exc)) from None
        except GitError as exc:
            raise EffectFailed(f"proof: {exc}") from None
        finally:
            artifacts.seal(folder)
        records = _records(folder)
        if setup_problem:
            results = [_setup_failed(names, setup_problem, records)]
        else:
            results = [_check_result(outcome, records) for outcome in outcomes]
        bundle = ProofBundle(
            quest=ctx.quest.quest_id,
            revision=asked["revision"],
            risk=risk,
            base=asked["base"],
            head=asked["head"],
            checks=tuple(results),
            runner=runner_name,
        )
        digest = bundle.digest()
        (folder / "proof-bundle.json").write_text(
            json.dumps({"bundle": bundle.model_dump(mode="json"), "digest": digest}, indent=2),
            encoding="utf-8",
        )
        quest = Quest.objects.get(pk=ctx.quest.pk)
        stale = _stale(quest, asked)
        if stale:  # it outlived what it was asked for while it ran: nothing to say
            return EffectResult("failed", {"stale": stale, "digest": digest})
        failed = [check for check in results if not check.passed]
        detail: dict[str, Any] = {
            "digest": digest,
            "checks": {c.name: c.result for c in results},
            "artifacts": str(folder),
        }
        if ctx.fetch_problem:
            detail["fetch"] = ctx.fetch_problem
        if not failed:
            event: ev.BaseEvent = ev.ProofCompleted(**_ids(request), bundle=bundle, digest=digest)
        else:
            reason = "; ".join(f"check {c.name!r} {c.result}: {c.note}" for c in failed)
            event = ev.ProofFailed(
                **_ids(request), reason=reason[:4000], bundle=bundle, digest=digest
            )
        return EffectResult("succeeded", detail, (event,))

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None  # a computation: delivered again after a crash, never ambiguous


def _asked(request: EffectRequest) -> dict[str, Any]:
    payload = request.payload
    head, base, revision = payload.get("head"), payload.get("base"), payload.get("revision")
    if not head or not base or not isinstance(revision, int):
        raise EffectFailed("run_proof needs the head, the base and the revision to prove")
    return {"head": str(head), "base": str(base), "revision": revision}


def _stale(quest: Quest | None, asked: dict[str, Any]) -> str:
    """Why the quest no longer wants this proof ("" when it does)."""
    if quest is None:
        return "the quest is gone"
    data = quest.data or {}
    for name, now, then in (
        ("revision", quest.revision, asked["revision"]),
        ("head", data.get("patch_head"), asked["head"]),
        ("base", data.get("base"), asked["base"]),
    ):
        if now != then:
            return f"the proof was asked for {name} {then}, and the quest's is now {now}"
    return ""


def _ids(request: EffectRequest) -> dict[str, Any]:
    return {
        "id": outcome_event_id(request.key, 0),
        "quest": request.quest_id,
        "at": timezone.now(),
        "actor": ACTOR,
    }


def _exactly(worktree: Path, head: str) -> None:
    """The checks run on exactly the recorded head: the commit, with no tracked file changed
    (``prepare_worktree`` removed untracked files before the setup; what the setup makes
    stays, as a virtual environment must)."""
    at = _git(worktree, "rev-parse", "HEAD").strip()
    if at != head:
        raise EffectFailed(f"the worktree is at {at[:12]}, not at the head {head[:12]}")
    dirty = _git(worktree, "status", "--porcelain", "--untracked-files=no").strip()
    if dirty:
        raise EffectFailed(f"the worktree of the head is not clean: {dirty.splitlines()[0]}")


def _git(worktree: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(worktree), *args],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise EffectFailed(f"git {args[0]} in {worktree}: {done.stderr.strip()[:500]}")
    return done.stdout


def _records(folder: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and "output_sha256" in record:
            found[path.stem] = record
    return found


def _check_result(outcome: CheckOutcome, records: dict[str, dict[str, Any]]) -> CheckResult:
    runs = outcome.runs
    last = outcome.last
    shown = last.runs[-1] if last.runs else None
    record = records.get(shown[0], {}) if shown else {}
    fields: dict[str, Any] = {
        "name": outcome.name,
        "command": outcome.command[:2000],
        "passed": outcome.passed,
        "result": outcome.result,
        "attempts": len(outcome.attempts),
        "duration_ms": int(sum(result.duration_seconds for _, result in runs) * 1000),
        "excerpt": _excerpt(record),
        "note": last.note[:2000],
    }
    if shown is not None:
        # A command killed by a signal has no exit status: -1, the signal is in the excerpt.
        fields["exit_code"] = -1 if shown[1].exit_code is None else int(shown[1].exit_code)
    stored = record.get("stored_sha256")
    if stored:
        fields["output_digest"] = f"sha256:{stored}"
    for name in ("base_failures", "head_failures", "probes"):
        value = getattr(last, name)
        if value:
            fields[name] = tuple(value)
    return CheckResult(**fields)


def _setup_failed(names: list[str], problem: str, records: dict[str, dict[str, Any]]):
    setups = [records[name] for name in sorted(records) if name.startswith("proof-prepare")]
    record = setups[-1] if setups else {}
    fields: dict[str, Any] = {
        "name": "setup",
        "command": " ".join(record.get("argv", []))[:2000],
        "passed": False,
        "result": "failed",
        "exit_code": int(record.get("exit_code") if record.get("exit_code") is not None else -1),
        "duration_ms": int(float(record.get("duration_seconds", 0)) * 1000),
        "excerpt": _excerpt(record),
        "note": f"{problem} No check ran ({', '.join(names) or 'none named'}).".strip()[:2000],
    }
    if record.get("stored_sha256"):
        fields["output_digest"] = f"sha256:{record['stored_sha256']}"
    return CheckResult(**fields)


def _excerpt(record: dict[str, Any]) -> str:
    text = str(record.get("output_excerpt", ""))
    return text[-EXCERPT:]
