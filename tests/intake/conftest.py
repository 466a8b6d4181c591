"""Forge webhooks: a real workspace with a Git journal, hooks whose secrets live in the
environment, quests moved to the states a test needs through the engine, and a helper that
signs a delivery the way each forge does."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from ephyra.core.proof import CheckResult
from intake.hooks.services import hook_create
from intake.models import Hook, ReviewLink, WebhookDelivery
from journal.store import Journal
from ledger.models import InboundEvent
from quests.engine import quest_apply
from quests.models import Workspace
from quests.workspaces import workspace_journal
from tests.audit_tampering import erase_audit_log
from tests.core.story import Story, bundle_for

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SECRET = "s3cr3t-hook-value-for-the-tests-only"

# The commits the fixtures name.
BASE_OLD = "9f2c1e0b5d3a4c7e8f1a2b3c4d5e6f7a8b9c0d1e"
BASE_NEW = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
PATCH = "4be1d7a9c3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8"
LANDED = "c0ffee15e1d2c3b4a5968778695a4b3c2d1e0f9a"

EVENT_HEADER = {
    "github": "X-GitHub-Event",
    "gitlab": "X-Gitlab-Event",
    "gitea": "X-Gitea-Event",
    "forgejo": "X-Forgejo-Event",
}
DELIVERY_HEADER = {
    "github": "X-GitHub-Delivery",
    "gitlab": "Idempotency-Key",
    "gitea": "X-Gitea-Delivery",
    "forgejo": "X-Forgejo-Delivery",
}


def fixture_bytes(forge: str, name: str) -> bytes:
    return (FIXTURES / forge / f"{name}.json").read_bytes()


def fixture(forge: str, name: str) -> dict[str, Any]:
    return json.loads(fixture_bytes(forge, name))


def sign(kind: str, body: bytes, secret: str = SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if kind == "github":
        return {"X-Hub-Signature-256": f"sha256={digest}"}
    if kind == "gitlab":
        return {"X-Gitlab-Token": secret}
    if kind == "forgejo":
        return {"X-Forgejo-Signature": digest}
    return {"X-Gitea-Signature": digest}


def deliver(
    client,
    kind: str,
    event: str,
    body: bytes | dict,
    *,
    delivery: str = "d-1",
    slug: str = "shop",
    secret: str = SECRET,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
):
    """POST one delivery, signed and labelled as ``kind`` would send it."""
    raw = json.dumps(body).encode() if isinstance(body, dict) else body
    sent = {EVENT_HEADER[kind]: event, DELIVERY_HEADER[kind]: delivery, **sign(kind, raw, secret)}
    sent.update(headers or {})
    return client.post(f"/hooks/{kind}/{slug}", data=raw, content_type=content_type, headers=sent)


def counts() -> tuple[int, int, int]:
    """What a refused delivery must leave unchanged."""
    return (
        WebhookDelivery.objects.count(),
        InboundEvent.objects.count(),
        ReviewLink.objects.count(),
    )


@pytest.fixture
def workspace(tmp_path, db):
    path = tmp_path / "mirror.git"
    Journal.init(path, bare=True)
    return Workspace.objects.create(
        slug="shop", name="Shop", repository=str(path), base_branch="main"
    )


@pytest.fixture
def hooks(workspace, monkeypatch) -> dict[str, Hook]:
    """A hook of every kind for ``workspace``; the secret is in $EPHYRA_TEST_HOOK_SECRET."""
    monkeypatch.setenv("EPHYRA_TEST_HOOK_SECRET", SECRET)
    return {
        kind: hook_create(workspace, kind, secret_ref="env:EPHYRA_TEST_HOOK_SECRET")[0]
        for kind in ("github", "gitlab", "gitea", "forgejo")
    }


class Quests:
    """Moves quests of a workspace along the main line through the engine."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def _apply(self, story: Story, type_: str, **fields: Any) -> None:
        outcome = quest_apply(self.workspace, story(type_, **fields))
        assert outcome.applied.decision.accepted, outcome.applied.decision

    def _quest(self, quest_id: str):
        return workspace_journal(self.workspace).load(quest_id)[0]

    def researching(self, quest_id: str) -> Story:
        story = Story(quest_id)
        self._apply(
            story,
            "signal_sensed",
            signal={"id": f"sig-{quest_id}", "fingerprint": f"fp-{quest_id}"},
        )
        self._apply(story, "triage_decided", route="auto_fix", risk="low")
        self._apply(story, "research_started")
        return story

    def ready(self, quest_id: str, *, head: str = PATCH, base: str = BASE_OLD) -> Story:
        story = self.researching(quest_id)
        self._apply(story, "hypothesis_written", summary="cart.total() reads item['sku']")
        self._apply(story, "checkpoint_decided", checkpoint="A", verdict="approve", actor="ann")
        self._apply(story, "reproduction_recorded", probe="pytest tests/test_cart.py")
        self._apply(story, "checkpoint_decided", checkpoint="B", verdict="approve", actor="ann")
        self._apply(story, "patch_recorded", head=head, base=base)
        proof = bundle_for(self._quest(quest_id), checks=(CheckResult(name="tests", passed=True),))
        self._apply(story, "proof_completed", **proof)
        return story

    def landing(self, quest_id: str, **kw: Any) -> Story:
        story = self.ready(quest_id, **kw)
        self._apply(story, "checkpoint_decided", checkpoint="C", verdict="approve", actor="ann")
        return story

    def watching(self, quest_id: str, *, commit: str = LANDED, **kw: Any) -> Story:
        story = self.landing(quest_id, **kw)
        self._apply(story, "landed", commit=commit)
        return story

    def closed(self, quest_id: str, **kw: Any) -> Story:
        story = self.watching(quest_id, **kw)
        self._apply(story, "watch_clean")
        return story


@pytest.fixture
def quests(workspace) -> Quests:
    return Quests(workspace)


@pytest.fixture
def committed():
    """For tests whose transactions commit (threads, the live server): the engine's audit rows
    are append-only, so Django's flush after the test needs them erased first."""
    yield
    erase_audit_log()
