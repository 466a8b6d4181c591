"""The triage routes' effect adapters and the pieces intake routes with: each adapter alone
against the real database and engine, a redelivered outcome recognised by its event id, the
facts triage reads from intake's signals, the files a patch touches (real commits), and the
mute as the admin shows it."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pygit2
import pytest

from ephyra.core.effects import EffectType
from ephyra.core.events import ChildAttached, ParentLanded, parse_event
from ephyra.core.ports import EffectRequest, outcome_event_id
from ephyra.telemetry import parse_logs
from intake.effects import MuteFingerprintAdapter, TriageAdapter
from intake.grouping import patch_files, touches
from intake.otlp.models import FingerprintMute
from intake.otlp.services import signals_receive
from intake.otlp.tokens import token_create
from journal.store import Journal
from ledger import operations
from ledger.lease import lease_acquire
from ledger.models import InboundEvent, Operation
from quests.effects import (
    DeliverChildEvidenceAdapter,
    MergeSignalAdapter,
    ResumeDependentsAdapter,
)
from quests.engine import quest_apply
from quests.models import Workspace
from tests.core.story import Story
from tests.intake.test_triage_routes import (
    CART,
    PROTOBUF,
    commit,
    export,
    quest,
    use_policy,
)
from worker import delivery

UNTIL = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def request(type_: EffectType, quest_id: str, payload: dict, key: str | None = None):
    key = key or f"{quest_id}:2:{type_}:{quest_id}-e2:0"
    return EffectRequest(key, type_, "shop", quest_id, payload, attempt=1)


def sensed(workspace, quest_id: str, fingerprint: str = "fp1", **kw) -> Story:
    story = Story(quest_id)
    outcome = quest_apply(
        workspace, story.signal(sid=f"s-{quest_id}", fingerprint=fingerprint, **kw)
    )
    assert outcome.applied.decision.accepted, outcome.applied.decision.reason
    return story


@pytest.fixture
def workspace(tmp_path, db):
    path = tmp_path / "mirror.git"
    Journal.init(path, bare=True)
    return Workspace.objects.create(slug="shop", name="Shop", repository=str(path))


# --- adapters -----------------------------------------------------------------------------------


def test_a_mute_redelivered_rewrites_its_one_row_and_keeps_the_count(workspace):
    payload = {"fingerprint": "fp1", "until": UNTIL.isoformat()}
    mute = request(EffectType.MUTE_FINGERPRINT, "q1", payload)
    first = MuteFingerprintAdapter().run(mute)
    assert first.status == "succeeded" and first.events == ()
    FingerprintMute.objects.filter(quest_id="q1").update(muted_signals=4)
    MuteFingerprintAdapter().run(mute)
    row = FingerprintMute.objects.get()
    assert (row.quest_id, row.fingerprint, row.until, row.muted_signals) == ("q1", "fp1", UNTIL, 4)


def test_a_merged_signal_is_recorded_and_nothing_else_happens(workspace):
    result = MergeSignalAdapter().run(
        request(EffectType.MERGE_SIGNAL, "q1", {"signal": "s2", "into": "q1"})
    )
    assert (result.status, result.detail, result.events) == (
        "succeeded",
        {"signal": "s2", "into": "q1"},
        (),
    )


def test_a_childs_evidence_goes_to_its_open_parent_as_child_attached(workspace):
    sensed(workspace, "parent", fingerprint="fp-parent")
    payload = {"parent": "parent", "child": "kid", "signal": {"id": "s9", "fingerprint": "fp9"}}
    deliver = request(EffectType.DELIVER_CHILD_EVIDENCE, "kid", payload)
    result = DeliverChildEvidenceAdapter().run(deliver)
    (event,) = result.events
    assert isinstance(event, ChildAttached)
    assert (event.quest, event.child, event.signal.id) == ("parent", "kid", "s9")
    assert event.id == outcome_event_id(deliver.key, 0)
    again = DeliverChildEvidenceAdapter().run(deliver)
    assert again.events[0].id == event.id  # a redelivery names the same event


def test_a_child_of_an_unknown_or_abandoned_parent_is_released(workspace):
    story = sensed(workspace, "parent", fingerprint="fp-parent")
    quest_apply(workspace, story("killed", reason="duplicate"))
    for parent in ("parent", "never-was"):
        payload = {"parent": parent, "child": "kid", "signal": {"id": "s9", "fingerprint": "fp9"}}
        result = DeliverChildEvidenceAdapter().run(
            request(EffectType.DELIVER_CHILD_EVIDENCE, "kid", payload)
        )
        (event,) = result.events
        assert isinstance(event, ParentLanded)
        assert (event.quest, event.parent, result.detail["released"]) == ("kid", parent, True)


def test_resume_dependents_names_one_parent_landed_per_child_by_the_ledger_key(workspace):
    payload = {"children": ["kid-a", "kid-b"], "why": "landed"}
    resume = request(EffectType.RESUME_DEPENDENTS, "parent", payload)
    result = ResumeDependentsAdapter().run(resume)
    assert [(e.quest, e.parent) for e in result.events] == [
        ("kid-a", "parent"),
        ("kid-b", "parent"),
    ]
    assert [e.id for e in result.events] == [
        outcome_event_id(resume.key, 0),
        outcome_event_id(resume.key, 1),
    ]
    assert result.detail == payload


def test_an_outcome_fed_back_twice_attaches_the_child_once(workspace):
    """The adapter feeds another quest than the effect's own; after a crash between the
    journal and the count of events taken, feeding again is a redelivery."""
    sensed(workspace, "parent", fingerprint="fp-parent")
    sensed(workspace, "kid", fingerprint="fp-kid", parent="parent")
    (op,) = Operation.objects.filter(type="deliver_child_evidence")
    fence = lease_acquire(workspace.pk, "w1")
    assert operations.claim(fence, op)
    delivery.deliver(fence, workspace, op)
    assert quest(workspace, "parent").children == ("kid",)
    head = quest(workspace, "parent").last_event
    Operation.objects.filter(pk=op.pk).update(events_applied=0)  # as if the count was lost
    op.refresh_from_db()
    assert delivery.feed_back(fence, workspace, op) == 1
    parent = quest(workspace, "parent")
    assert parent.children == ("kid",) and parent.last_event == head


# --- what triage reads ---------------------------------------------------------------------------


PATHS_POLICY = """\
version: 1
checkpoints: {A: {mode: blocking}, B: {mode: blocking}, C: {mode: blocking}}
proof: {attempts: 3, matrix: {low: [tests], medium: [tests], high: [tests]}}
triage:
  default: {route: human, risk: medium}
  rules:
    - name: errors raised by the mailer are researched
      when: {paths: ["shop/mailer.py"]}
      route: research_only
    - name: cart errors are fixed
      when: {paths: ["shop/cart.*"], exception_types: [KeyError]}
      route: auto_fix
      risk: low
"""


def test_triage_rules_read_the_exception_type_and_frame_paths_of_the_quests_signal(workspace):
    use_policy(workspace, PATHS_POLICY)
    token = token_create(workspace)[0]
    body = export(CART, "'sku-1'")
    (signal,) = signals_receive(
        token,
        parse_logs(body, PROTOBUF),
        body_digest=hashlib.sha256(body).hexdigest(),
        received_at=datetime.now(UTC),
    )
    assert signal.paths == ["shop/cart.py", "shop/views.py"]  # innermost first
    (inbound,) = InboundEvent.objects.all()
    quest_apply(workspace, parse_event(inbound.payload))
    triage = request(EffectType.RUN_TRIAGE, signal.quest_id, {})
    result = TriageAdapter().run(triage)
    assert result.detail == {"route": "auto_fix", "rule": "cart errors are fixed"}
    assert result.events[0].risk == "low"


def test_a_quest_no_otlp_signal_reached_is_triaged_on_fingerprint_and_severity(workspace):
    use_policy(workspace, PATHS_POLICY)
    sensed(workspace, "q-hand", fingerprint="fp-hand")
    result = TriageAdapter().run(request(EffectType.RUN_TRIAGE, "q-hand", {}))
    assert result.detail == {"route": "human", "rule": "default"}


# --- the files a patch touches -------------------------------------------------------------------


@pytest.fixture
def repo(workspace) -> pygit2.Repository:
    return pygit2.Repository(workspace.repository)


def test_a_patch_touches_the_files_from_its_merge_base_even_after_the_base_moved(repo):
    root = commit(repo, {"shop/cart.py": "1", "shop/orders.py": "1"}, [], "root")
    head = commit(repo, {"shop/cart.py": "2", "shop/orders.py": "1"}, [root], "patch")
    moved = commit(repo, {"shop/cart.py": "1", "shop/orders.py": "2"}, [root], "base moves")
    assert patch_files(repo, str(root), str(head)) == {"shop/cart.py"}
    assert patch_files(repo, str(moved), str(head)) == {"shop/cart.py"}  # not orders.py
    assert patch_files(repo, None, str(head)) == {"shop/cart.py"}  # the first parent


def test_a_patch_the_repository_does_not_have_touches_nothing(repo):
    root = commit(repo, {"a/b.py": "1"}, [], "root")
    assert patch_files(repo, str(root), "e" * 40) == frozenset()
    assert patch_files(repo, str(root), "not-a-sha") == frozenset()
    assert patch_files(repo, None, str(root)) == frozenset()  # a root commit has no patch


@pytest.mark.parametrize(
    ("files", "paths", "expected"),
    [
        ({"shop/cart.py"}, ("shop/cart.py",), True),
        ({"shop/cart.py"}, ("srv/shop/cart.py",), True),  # a deployment root left on the frame
        ({"services/shop/cart.py"}, ("shop/cart.py",), True),  # a monorepo prefix
        ({"cart.py"}, ("shop/cart.py",), False),  # a bare file name is too weak to match
        ({"shop/cart.py"}, ("cart.py",), False),
        ({"shop/cart.py"}, ("shop/scart.py", "shop/orders.py"), False),
        (set(), ("shop/cart.py",), False),
    ],
)
def test_which_frame_paths_a_patch_touches(files, paths, expected):
    assert touches(frozenset(files), paths) is expected


# --- the admin ------------------------------------------------------------------------------


def test_the_admin_lists_a_mute_with_its_count(admin_client, workspace):
    FingerprintMute.objects.create(
        workspace=workspace, quest_id="q-muted", fingerprint="v1:abc", until=UNTIL, muted_signals=7
    )
    page = admin_client.get("/admin/intake/fingerprintmute/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "q-muted" in text and ">7<" in text
    assert admin_client.get("/admin/intake/fingerprintmute/add/").status_code == 403
