"""A long effect for the job tests: it runs a real command through the runner, as an agent step
does, and stops when the request says it is cancelled."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

from ephyra.core.events import HypothesisWritten, ResearchStarted
from ephyra.core.ports import EffectRequest, EffectResult, RunLimits, RunRequest, outcome_event_id
from ephyra.runner import LocalRunner

SECONDS = {"value": 30.0}  # how long the command sleeps; a test lowers it


class SleepingStep:
    """``start_agent``: sleep as a long step would work, then write a hypothesis."""

    runs_long = True

    def run(self, request: EffectRequest) -> EffectResult:
        work = Path(tempfile.mkdtemp(prefix="ephyra-job-"))
        result = LocalRunner().run(
            RunRequest(
                argv=("sleep", str(SECONDS["value"])),
                cwd=str(work),
                artifacts_dir=str(work / "artifacts"),
                name="sleep",
                env={},
                limits=RunLimits(wall_seconds=120),
            ),
            should_stop=request.cancelled,
        )
        if result.stopped:
            return EffectResult("failed", {"stopped": True})
        at = datetime.now(UTC)
        started = ResearchStarted(
            id=outcome_event_id(request.key, 0), quest=request.quest_id, at=at, actor="ephyra:agent"
        )
        written = HypothesisWritten(
            id=outcome_event_id(request.key, 1),
            quest=request.quest_id,
            at=at,
            actor="ephyra:agent",
            summary="slept on it",
        )
        return EffectResult("succeeded", {"exit": result.exit_code}, (started, written))

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None
