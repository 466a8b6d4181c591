"""A quest does the work on a real repository, through the worker: research, reproduction,
the culprit located by bisect, its revert on the revision's branch and the proof of it,
stopping at A, B and C for a person. No model; real subprocesses through the runner."""

from __future__ import annotations

import hashlib
import json
import subprocess
from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model

from ephyra.agent.inputs import SignalFacts
from ephyra.compose import effect_adapters
from ephyra.core.canonical import canonical_digest
from ephyra.core.events import SignalRef, SignalSensed
from ephyra.core.ports import RunnerUnavailable
from ephyra.runner import SandboxRunner
from intake.models import IngestedSignal
from ledger.inbound import submit_event
from ledger.models import Operation
from quests import actions
from quests.actions import Seen
from quests.models import Quest, Workspace
from quests.policies import policy_version_add
from quests.roles import Role, role_grant
from quests.workspaces import workspace_create
from tests.agent.repos import Shop, python, shop_history
from tests.audit_tampering import erase_audit_log
from tests.waiting import wait_until
from worker.jobs import JOBS
from worker.loop import Worker

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = """version: 1
checkpoints: {{A: {{mode: blocking}}, B: {{mode: blocking}}, C: {{mode: blocking}}}}
triage:
  default: {{route: auto_fix, risk: low}}
proof:
  matrix: {{low: [{checks}], medium: [tests], high: [tests, probe]}}
  allow_flaky: {allow_flaky}
work:
  runner: {runner}
  setup: [[{python}, tools/setup.py]]
  test: [{python}, -m, pytest, -q]
{work_extra}"""


def shop_workspace(
    tmp_path,
    settings,
    *,
    conflict: bool = False,
    runner: str = "local",
    checks: str = "tests, probe",
    allow_flaky: bool = False,
    work_extra: str = "",
    **history,
):
    settings.DATA_DIR = tmp_path / "data"
    settings.EPHYRA_POLL_MS = 20
    settings.EPHYRA_ACTION_WAIT_MS = 0
    shop = shop_history(tmp_path / "shop", conflict=conflict, **history)
    workspace = workspace_create("shop", str(shop.path), base_branch="main")
    text = POLICY.format(
        python=python(),
        runner=runner,
        checks=checks,
        allow_flaky=str(allow_flaky).lower(),
        work_extra=work_extra.format(python=python()),
    )
    version = policy_version_add(workspace, text, reviewed_by="setup")
    Workspace.objects.filter(pk=workspace.pk).update(policy=version)
    effect_adapters.cache_clear()
    return shop, Workspace.objects.get(pk=workspace.pk)


def production_error(
    workspace: Workspace, shop: Shop, quest_id: str = "q-cart", facts: SignalFacts | None = None
) -> None:
    """The error as intake stores it, and the signal that opens the quest."""
    facts = facts or shop.signal()
    title = f"{facts.exception_type}: {facts.message}"
    now = datetime.now(UTC)
    IngestedSignal.objects.create(
        workspace=workspace,
        signal_id=f"sig-{quest_id}",
        quest_id=quest_id,
        event=IngestedSignal.Event.SENSED,
        source="log",
        severity="error",
        fingerprint=facts.fingerprint,
        fingerprint_version=1,
        title=title,
        exception_type=facts.exception_type,
        message=facts.message,
        frames=[
            {
                "file": f.file,
                "line": f.line,
                "function": f.function,
                "module": f.module,
                "in_app": f.in_app,
            }
            for f in facts.frames
        ],
        received_at=now,
    )
    signal = SignalRef(id=f"sig-{quest_id}", fingerprint=facts.fingerprint, title=title)
    sensed = SignalSensed(id=f"sensed-{quest_id}", quest=quest_id, at=now, signal=signal)
    submit_event(workspace, sensed, source="t")


@pytest.fixture
def worker():
    running = Worker(owner="w-work")
    running.start()
    yield running
    running.stop()
    JOBS.wait()
    effect_adapters.cache_clear()
    erase_audit_log()


def reached(state: str, seconds: float = 120, quest_id: str | None = None) -> Quest:
    """The quest (the only one, or ``quest_id``) once it is in ``state``."""
    rows = Quest.objects.all() if quest_id is None else Quest.objects.filter(quest_id=quest_id)
    assert wait_until(lambda: rows.filter(state=state).exists(), seconds), list(
        Quest.objects.values_list("quest_id", "state", "park_reason")
    )
    return rows.get()


def approve(quest: Quest, checkpoint: str) -> None:
    ann = get_user_model().objects.filter(username="ann").first()
    if ann is None:
        ann = get_user_model().objects.create_user("ann", password="pw")
        role_grant(ann, quest.workspace, Role.REVIEWER)
    actions.checkpoint_decide(
        ann,
        quest,
        checkpoint=checkpoint,
        verdict="approve",
        seen=Seen(quest.journal_head, quest.revision),
        key=f"approve-{quest.quest_id}-{quest.revision}-{checkpoint}",
    )


def test_a_regression_is_researched_reproduced_located_reverted_and_proven(
    tmp_path, settings, worker, client
):
    shop, workspace = shop_workspace(tmp_path, settings)
    production_error(workspace, shop)

    quest = reached("hypothesised")
    evidence = quest_event(quest, "hypothesis_written")["evidence"]
    assert shop.culprit in json.dumps(evidence)  # a suspect already
    approve(quest, "A")

    quest = reached("planned")
    recorded = quest_event(quest, "reproduction_recorded")
    assert shop.node_id in recorded["probe"]
    assert recorded["evidence"]["culprit"] == shop.culprit
    assert recorded["plan"].startswith(f"revert {shop.culprit[:12]}")
    approve(quest, "B")

    # The revert is proven (the suite and the reproduction at the head) and C waits.
    quest = reached("ready")
    head, base = quest.data["patch_head"], quest.data["base"]
    assert base == shop.head
    mirror = workspace.repository
    branch = subprocess.run(
        ["git", "--git-dir", mirror, "rev-parse", "refs/heads/ephyra/q-cart/r1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert branch == head
    message = subprocess.run(
        ["git", "--git-dir", mirror, "log", "-1", "--format=%B", head],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"This reverts commit {shop.culprit}" in message
    proven = quest_event(quest, "proof_completed")
    bundle = proven["bundle"]
    assert canonical_digest(bundle) == proven["digest"] == quest.data["proof_digest"]
    assert (bundle["quest"], bundle["revision"], bundle["risk"]) == ("q-cart", 1, "low")
    assert (bundle["base"], bundle["head"], bundle["runner"]) == (base, head, "local")
    assert [(c["name"], c["result"]) for c in bundle["checks"]] == [
        ("tests", "passed"),
        ("probe", "passed"),
    ]
    tests, probe = bundle["checks"]
    assert tests["exit_code"] == 0 and tests["duration_ms"] > 0 and "passed" in tests["excerpt"]
    assert probe["probes"] == ["q-cart (this quest's reproduction): passed"]
    # Each check names its output by the digest of the file kept (redacted) as an artifact.
    stored = {
        "sha256:" + hashlib.sha256(log.read_bytes()).hexdigest()
        for log in (tmp_path / "data" / "artifacts").rglob("proof-*/*.log")
    }
    assert {tests["output_digest"], probe["output_digest"]} <= stored
    asked = Operation.objects.filter(quest_id="q-cart", type="request_checkpoint")
    assert wait_until(lambda: asked.filter(payload__checkpoint="C").exists(), 30)
    # The quest page shows each check: its result, duration, output and the digest verified.
    client.force_login(get_user_model().objects.get(username="ann"))
    page = client.get("/q/shop/q-cart/").content.decode()
    assert "matches the canonical SHA-256 recomputed here" in page
    assert f"{tests['duration_ms']} ms" in page and tests["output_digest"] in page
    assert "q-cart (this quest&#x27;s reproduction): passed" in page
    assert "<summary>output</summary>" in page


def test_a_revert_that_conflicts_parks_the_quest_with_the_files(tmp_path, settings, worker):
    shop, workspace = shop_workspace(tmp_path, settings, conflict=True)
    production_error(workspace, shop)
    approve(reached("hypothesised"), "A")
    approve(reached("planned"), "B")
    quest = reached("parked")
    assert quest.park_reason == "revert_conflict"
    failed = quest_event(quest, "patch_failed")
    assert "shop/cart.py" in failed["files"]


def quest_event(quest: Quest, kind: str) -> dict:
    from quests.workspaces import workspace_journal

    history = workspace_journal(quest.workspace).history(quest.quest_id)
    return next(e.event for e in reversed(history) if e.event.type == kind).model_dump(mode="json")


def test_the_same_work_runs_in_the_sandbox(tmp_path, settings, worker):
    import shutil
    import sys

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is missing: apt-get install bubblewrap (CI installs it)")
    try:
        SandboxRunner().check()
    except RunnerUnavailable as problem:  # bubblewrap cannot create namespaces here
        pytest.skip(str(problem))
    # The sandbox shows the system and the worktree only: this test's Python lives elsewhere.
    settings.EPHYRA_SANDBOX_PATHS = sorted({sys.prefix, sys.base_prefix})
    shop, workspace = shop_workspace(tmp_path, settings, runner="sandbox")
    production_error(workspace, shop)
    approve(reached("hypothesised"), "A")
    quest = reached("planned")
    assert quest_event(quest, "reproduction_recorded")["evidence"]["culprit"] == shop.culprit
    records = list((tmp_path / "data" / "artifacts").rglob("*.json"))
    assert any(json.loads(r.read_text()).get("runner") == "sandbox" for r in records)
    approve(quest, "B")
    quest = reached("ready")
    assert quest.data["base"] == shop.head
    bundle = quest_event(quest, "proof_completed")["bundle"]
    assert bundle["runner"] == "sandbox"
    assert [c["result"] for c in bundle["checks"]] == ["passed", "passed"]


def test_a_killed_quests_worktree_is_removed_and_its_branch_kept(tmp_path, settings, worker):
    shop, workspace = shop_workspace(tmp_path, settings)
    production_error(workspace, shop)
    quest = reached("hypothesised")
    tree = tmp_path / "data" / "worktrees" / "shop" / "q-cart" / "r1"
    assert tree.is_dir()
    boss = get_user_model().objects.create_user("boss", password="pw")
    role_grant(boss, workspace, Role.ADMIN)
    actions.quest_kill(
        boss, quest, reason="not ours", seen=Seen(quest.journal_head, quest.revision), key="k"
    )
    reached("abandoned")
    worker._cleaned.clear()  # look now, not in a minute
    worker.wake.set()
    assert wait_until(lambda: not tree.exists(), 30)
    branches = subprocess.run(
        ["git", "--git-dir", workspace.repository, "branch", "--list", "ephyra/*"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "ephyra/q-cart/r1" in branches
