"""Every triage route, end to end: OTLP exports over HTTP, the engine, and the ledger's worker
draining the workspace (its effects delivered by the built-in adapters, their outcomes fed back).

Muted (ignore → counted → a new quest after the mute), duplicate merge, the conflict child
(parked, attached to its parent, resumed when the parent lands or is abandoned), regression
reopen of a closed quest, and a burst of one fingerprint spread over many exports.
"""

from __future__ import annotations

import hashlib
import itertools
from datetime import timedelta

import pygit2
import pytest
from django.conf import settings
from django.test import override_settings
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

from ephyra.compose import effect_adapters
from ephyra.core.proof import CheckResult
from ephyra.core.quest import Quest as QuestValue
from ephyra.policy.autonomy import policy_digest
from ephyra.telemetry import parse_logs
from intake.otlp.models import FingerprintMute, IngestedSignal, MergeWindow
from intake.otlp.services import signals_receive
from intake.otlp.sightings import merges_carry
from intake.otlp.tokens import token_create
from journal.store import Journal
from ledger.inbound import submit_event
from ledger.models import InboundEvent, Operation
from quests.models import PolicyVersion, Quest, Workspace
from tests.core.lifecycle_helpers import LANDED, next_event
from tests.core.story import Story
from tests.intake.test_otlp_refusals import PROTOBUF, post
from worker.loop import Worker

PASSING = (CheckResult(name="tests", passed=True),)
SIGNATURE = pygit2.Signature("Tess Ter", "tess@example.com", 1_700_000_000, 0)


def trace(exception: str, message: str, *frames: tuple[str, str]) -> str:
    """A Python traceback through ``frames`` (path under /srv/app, function), outermost first."""
    lines = ["Traceback (most recent call last):"]
    for number, (path, function) in enumerate(frames, start=10):
        lines += [f'  File "/srv/app/{path}", line {number}, in {function}', "    do()"]
    return "\n".join([*lines, f"{exception}: {message}"])


CART = ("KeyError", (("shop/views.py", "checkout"), ("shop/cart.py", "total")))
ORDERS = ("TypeError", (("shop/views.py", "place"), ("shop/orders.py", "place")))
MAILER = ("ValueError", (("shop/views.py", "signup"), ("shop/mailer.py", "send")))


def export(kind: tuple[str, tuple], *messages: str) -> bytes:
    """One OTLP logs export with an ERROR record per message, all of one error kind."""
    exception, frames = kind

    def attr(key: str, value: str) -> KeyValue:
        return KeyValue(key=key, value=AnyValue(string_value=value))

    records = [
        LogRecord(
            time_unix_nano=1_700_000_000_000_000_000,
            severity_number=17,
            severity_text="ERROR",
            body=AnyValue(string_value=f"{exception}: {message}"),
            attributes=[
                attr("exception.type", exception),
                attr("exception.message", message),
                attr("exception.stacktrace", trace(exception, message, *frames)),
            ],
        )
        for message in messages
    ]
    request = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=records)])]
    )
    return request.SerializeToString()


def fingerprint_of(kind) -> str:
    return parse_logs(export(kind, "x"), PROTOBUF).candidates[0].fingerprint


def commit(repo: pygit2.Repository, files: dict[str, str], parents: list, message: str):
    index = pygit2.Index()
    for path, text in files.items():
        index.add(
            pygit2.IndexEntry(path, repo.create_blob(text.encode()), pygit2.GIT_FILEMODE_BLOB)
        )
    return repo.create_commit(None, SIGNATURE, SIGNATURE, message, index.write_tree(repo), parents)


@pytest.fixture
def workspace(tmp_path, db):
    """A workspace whose repository (journals and code alike) is a real bare repository."""
    path = tmp_path / "mirror.git"
    Journal.init(path, bare=True)
    return Workspace.objects.create(slug="shop", name="Shop", repository=str(path))


@pytest.fixture
def repo(workspace) -> pygit2.Repository:
    return pygit2.Repository(workspace.repository)


@pytest.fixture
def token(workspace) -> str:
    return token_create(workspace, name="triage")[1]


@pytest.fixture
def worker(workspace, settings):
    # These tests play the landing themselves (``advance`` submits ``landed``); their
    # workspace has no remote to land on, so no landing adapter serves them.
    off = {"land": "", "rebase": "", "rollback": ""}
    settings.EPHYRA_EFFECT_ADAPTERS = {**settings.EPHYRA_EFFECT_ADAPTERS, **off}
    effect_adapters.cache_clear()
    worker = Worker(owner="w-triage")
    yield worker
    worker.release()
    effect_adapters.cache_clear()


def use_policy(workspace, text: str) -> None:
    version = PolicyVersion.objects.create(
        workspace=workspace, digest=policy_digest(text), text=text, reviewed_by="ann"
    )
    workspace.policy = version
    workspace.save(update_fields=["policy"])


POLICY = """\
version: 1
checkpoints: {A: {mode: blocking}, B: {mode: blocking}, C: {mode: blocking}}
proof: {attempts: 3, matrix: {low: [tests], medium: [tests], high: [tests]}}
triage:
  default: {route: human, risk: medium}
  mute_hours: 24
  rules:
    - name: key errors are noise
      when: {exception_types: [KeyError]}
      route: ignore
      risk: low
"""


def quest(workspace, quest_id: str) -> QuestValue:
    return QuestValue.from_dict(Quest.objects.get(workspace=workspace, quest_id=quest_id).data)


def only_quest_of(workspace, kind) -> QuestValue:
    (row,) = Quest.objects.filter(workspace=workspace, fingerprint=fingerprint_of(kind))
    return quest(workspace, row.quest_id)


def send(client, token, kind, *messages) -> None:
    response = post(client, export(kind, *messages), token=token)
    assert response.status_code == 200, response.content


_ADVANCES = itertools.count(1)


def advance(workspace, worker, quest_id: str, until: str, **patch) -> QuestValue:
    """Move a quest along the main line by submitting each event and draining the worker, as
    people and agents would; ``patch`` overrides the recorded head and base."""
    story = Story(quest_id)
    # Clear of any id the quest's own events used, and of an earlier call's: an event id names
    # one event, and a different event under a taken id is refused.
    story.n = 100 * next(_ADVANCES)
    for _ in range(20):
        current = quest(workspace, quest_id)
        if str(current.state) == until:
            return current
        event = next_event(story, current, checks=PASSING)
        if event.type == "patch_recorded" and patch:
            event = story("patch_recorded", **patch)
        row = submit_event(workspace, event, source="test")
        worker.step()
        row.refresh_from_db()
        assert row.state == InboundEvent.State.APPLIED, (event.type, row.result)
    raise AssertionError(f"{quest_id} never reached {until}")


def operations(workspace, type_: str) -> list[Operation]:
    return list(Operation.objects.filter(workspace=workspace, type=type_).order_by("pk"))


# --- ignore: muted, counted, and a new quest once the mute is over ------------------------------


def test_an_ignored_fingerprint_is_muted_its_signals_counted_and_a_new_quest_opens_after(
    client, token, workspace, worker
):
    use_policy(workspace, POLICY)
    send(client, token, CART, "'sku-1'")
    worker.step()
    first = only_quest_of(workspace, CART)
    # The rule matched on the exception type intake keeps for the quest's signal.
    assert (str(first.state), first.route, first.risk) == ("abandoned", "ignore", "low")
    (mute_op,) = operations(workspace, "mute_fingerprint")
    assert mute_op.state == Operation.State.SUCCEEDED
    mute = FingerprintMute.objects.get(workspace=workspace)
    assert (mute.quest_id, mute.fingerprint) == (first.id, fingerprint_of(CART))
    assert mute.until == first.muted_until
    assert first.muted_until - first.updated_at == timedelta(hours=24)

    inbound = InboundEvent.objects.count()
    for n in range(3):
        send(client, token, CART, f"'sku-{n + 10}'")
    worker.step()
    assert InboundEvent.objects.count() == inbound  # no quest event for a muted signal
    assert Quest.objects.filter(workspace=workspace).count() == 1
    muted = IngestedSignal.objects.filter(event=IngestedSignal.Event.MUTED)
    assert muted.count() == 3 and {s.quest_id for s in muted} == {first.id}
    mute.refresh_from_db()
    assert mute.muted_signals == 3 and mute.last_signal_at is not None

    # The mute is over: the same error opens a new quest, triaged (and muted) afresh.
    body = export(CART, "'sku-99'")
    later = mute.until + timedelta(seconds=1)
    (signal,) = signals_receive(
        token_row(workspace),
        parse_logs(body, PROTOBUF),
        body_digest=hashlib.sha256(body).hexdigest(),
        received_at=later,
    )
    assert signal.event == IngestedSignal.Event.SENSED and signal.quest_id != first.id
    worker.step()
    assert str(quest(workspace, signal.quest_id).state) == "abandoned"
    assert FingerprintMute.objects.filter(workspace=workspace).count() == 2
    mute.refresh_from_db()
    assert mute.muted_signals == 3  # the expired mute's count is history, unchanged


def token_row(workspace):
    return workspace.ingest_tokens.get()


@pytest.fixture
def no_mute_adapter(settings):
    """The ``mute_fingerprint`` effect stays pending: no adapter delivers it."""
    settings.EPHYRA_EFFECT_ADAPTERS = {"mute_fingerprint": ""}
    effect_adapters.cache_clear()
    yield
    effect_adapters.cache_clear()


@pytest.mark.usefixtures("no_mute_adapter")
def test_a_signal_between_the_ignore_and_its_mute_effect_is_muted_already(
    client, token, workspace, worker
):
    """The quest's journalled ``muted_until`` holds before the mute row exists; the count made
    then is kept when the effect is delivered later."""
    use_policy(workspace, POLICY)
    send(client, token, CART, "'sku-1'")
    first = IngestedSignal.objects.get().quest_id
    worker.step()
    assert str(quest(workspace, first).state) == "abandoned"
    assert not FingerprintMute.objects.exists()
    send(client, token, CART, "'sku-2'")
    mute = FingerprintMute.objects.get()
    assert (mute.quest_id, mute.muted_signals) == (first, 1)
    assert mute.until == quest(workspace, first).muted_until
    assert IngestedSignal.objects.filter(event=IngestedSignal.Event.MUTED).count() == 1

    effect_adapters.cache_clear()
    with override_settings(EPHYRA_EFFECT_ADAPTERS={}):
        effect_adapters.cache_clear()
        worker.step()
    mute.refresh_from_db()
    assert operations(workspace, "mute_fingerprint")[0].state == Operation.State.SUCCEEDED
    assert mute.muted_signals == 1


# --- duplicate and burst ------------------------------------------------------------------------


def test_a_duplicate_merges_into_the_open_quest_and_counts(client, token, workspace, worker):
    send(client, token, CART, "'sku-1'")
    worker.step()
    opened = only_quest_of(workspace, CART)
    assert str(opened.state) == "triaged"  # the default policy: a person starts it
    send(client, token, CART, "'sku-2'")
    worker.step()
    merged = quest(workspace, opened.id)
    assert merged.signal_count == 2 and str(merged.state) == "triaged"
    assert Quest.objects.filter(workspace=workspace).count() == 1
    (merge,) = operations(workspace, "merge_signal")
    assert merge.state == Operation.State.SUCCEEDED
    assert merge.outcome["detail"]["into"] == opened.id


def test_a_burst_over_many_exports_before_the_worker_runs_makes_one_quest_with_a_count(
    client, token, workspace, worker
):
    for n in range(25):
        send(client, token, CART, f"'sku-{n}'", f"'sku-{n}b'")
    kinds = list(IngestedSignal.objects.values_list("event", flat=True))
    assert kinds.count("signal_sensed") == 1 and kinds.count("signal_merged") == 49
    # The first export opens the quest and merges its repeat; the next 24, inside the merge
    # window, are held for the event that ends it (intake.otlp.sightings).
    assert InboundEvent.objects.count() == 2
    worker.step()
    burst = only_quest_of(workspace, CART)
    assert burst.signal_count == 2
    window = MergeWindow.objects.get(quest_id=burst.id)
    assert window.held == 48
    ended = window.last_event_at + timedelta(seconds=settings.EPHYRA_MERGE_WINDOW_SECONDS)
    assert merges_carry(workspace, burst.id, ended).count == 48
    worker.step()
    assert quest(workspace, burst.id).signal_count == 50
    assert Quest.objects.filter(workspace=workspace).count() == 1
    refused = InboundEvent.objects.exclude(state=InboundEvent.State.APPLIED)
    assert not refused.exists()


# --- conflict: a parked child waits for the quest whose patch touches its files ---------------


@pytest.fixture
def patch(repo) -> dict[str, str]:
    """A base commit and a patch on it that changes shop/cart.py (and adds a test)."""
    base = commit(repo, {"shop/cart.py": "v1\n", "shop/orders.py": "v1\n"}, [], "base")
    head = commit(
        repo,
        {"shop/cart.py": "v2\n", "shop/orders.py": "v1\n", "tests/test_cart.py": "t\n"},
        [base],
        "fix the order total",
    )
    return {"head": str(head), "base": str(base)}


def parent_in_proof(client, token, workspace, worker, patch) -> QuestValue:
    """An ORDERS quest whose recorded patch changes shop/cart.py."""
    send(client, token, ORDERS, "unsupported operand")
    worker.step()
    parent = only_quest_of(workspace, ORDERS)
    return advance(workspace, worker, parent.id, "ready", **patch)


def test_an_error_in_a_file_an_open_patch_touches_is_a_parked_child_of_that_quest(
    client, token, workspace, worker, patch
):
    parent = parent_in_proof(client, token, workspace, worker, patch)
    send(client, token, CART, "'sku-1'")
    signal = IngestedSignal.objects.get(fingerprint=fingerprint_of(CART))
    assert (signal.event, signal.parent) == ("signal_sensed", parent.id)
    assert InboundEvent.objects.get(event_id__startswith="sensed-", quest_id=signal.quest_id)
    worker.step()
    child = quest(workspace, signal.quest_id)
    assert (str(child.state), child.park_reason, child.parent) == (
        "parked",
        "waiting_for_parent",
        parent.id,
    )
    assert quest(workspace, parent.id).children == (child.id,)
    (delivered,) = operations(workspace, "deliver_child_evidence")
    assert delivered.state == Operation.State.SUCCEEDED and delivered.events_applied == 1
    assert not Operation.objects.filter(quest_id=child.id, type="run_triage").exists()

    # More of the child's error merges into the parked child, not a new quest.
    send(client, token, CART, "'sku-2'")
    worker.step()
    assert quest(workspace, child.id).signal_count == 2

    # The parent lands: the child resumes and is triaged on its own.
    advance(workspace, worker, parent.id, "watching")
    (resume,) = operations(workspace, "resume_dependents")
    assert resume.state == Operation.State.SUCCEEDED
    assert resume.outcome["detail"] == {"children": [child.id], "why": "landed"}
    resumed = quest(workspace, child.id)
    assert (str(resumed.state), resumed.park_reason) == ("triaged", None)


def test_a_child_is_released_to_triage_when_its_parent_is_abandoned(
    client, token, workspace, worker, patch
):
    parent = parent_in_proof(client, token, workspace, worker, patch)
    send(client, token, CART, "'sku-1'")
    worker.step()
    child = IngestedSignal.objects.get(fingerprint=fingerprint_of(CART)).quest_id
    killed = submit_event(
        workspace, Story(parent.id)("killed", reason="wrong fix", actor="ann"), source="test"
    )
    worker.step()
    killed.refresh_from_db()
    assert killed.state == InboundEvent.State.APPLIED
    (resume,) = operations(workspace, "resume_dependents")
    assert resume.outcome["detail"]["why"] == "abandoned"
    assert str(quest(workspace, child).state) == "triaged"


def test_a_child_whose_parent_landed_meanwhile_is_released_at_once(
    client, token, workspace, worker, patch
):
    """Intake saw the patch open, but the parent lands before the child's evidence is
    delivered: it will never ask for its dependents again, so the child is let go at once."""
    parent = parent_in_proof(client, token, workspace, worker, patch)
    send(client, token, CART, "'sku-1'")  # queued; the worker has not seen it yet
    child = IngestedSignal.objects.get(fingerprint=fingerprint_of(CART)).quest_id
    story = Story(parent.id)
    story.n = 200
    approve = story("checkpoint_decided", checkpoint="C", verdict="approve", actor="ann")
    submit_event(workspace, approve, source="test")
    submit_event(workspace, story("landed", commit=LANDED), source="test")
    worker.step()  # the child is parked, the parent lands, then the effects are delivered
    assert str(quest(workspace, parent.id).state) == "watching"
    (delivered,) = operations(workspace, "deliver_child_evidence")
    assert delivered.outcome["detail"]["released"] is True
    assert quest(workspace, parent.id).children == ()
    assert str(quest(workspace, child).state) == "triaged"


def test_an_error_outside_the_patched_files_opens_its_own_quest(
    client, token, workspace, worker, patch
):
    parent_in_proof(client, token, workspace, worker, patch)
    send(client, token, MAILER, "bad address")
    signal = IngestedSignal.objects.get(fingerprint=fingerprint_of(MAILER))
    assert (signal.event, signal.parent) == ("signal_sensed", "")
    worker.step()
    assert str(quest(workspace, signal.quest_id).state) == "triaged"


# --- regression: a closed quest reopens -----------------------------------------------------


def test_the_error_of_a_closed_quest_reopens_it_and_a_second_one_merges(
    client, token, workspace, worker
):
    send(client, token, CART, "'sku-1'")
    worker.step()
    opened = only_quest_of(workspace, CART)
    closed = advance(workspace, worker, opened.id, "closed")
    assert closed.revision == 1

    send(client, token, CART, "'sku-2'")
    send(client, token, CART, "'sku-3'")  # before the worker applied the reopen
    events = list(
        IngestedSignal.objects.filter(quest_id=opened.id)
        .order_by("pk")
        .values_list("event", flat=True)
    )
    assert events == ["signal_sensed", "regression_reopened", "signal_merged"]
    worker.step()
    reopened = quest(workspace, opened.id)
    assert (str(reopened.state), reopened.revision, reopened.signal_count) == ("researching", 2, 3)
    assert reopened.patch_head is None  # the new revision starts over
    assert Quest.objects.filter(workspace=workspace).count() == 1


def test_a_child_resumes_even_when_its_parent_closes_before_resume_dependents_is_delivered(
    client, token, workspace, worker, patch
):
    parent = parent_in_proof(client, token, workspace, worker, patch)
    send(client, token, CART, "'sku-1'")
    worker.step()
    child = IngestedSignal.objects.get(fingerprint=fingerprint_of(CART)).quest_id
    assert quest(workspace, parent.id).children == (child,)
    story = Story(parent.id)
    story.n = 200
    approve = story("checkpoint_decided", checkpoint="C", verdict="approve", actor="ann")
    for event in (approve, story("landed", commit=LANDED), story("watch_clean", summary="ok")):
        submit_event(workspace, event, source="test")
    worker.step()  # all three are applied before the effects are delivered
    assert str(quest(workspace, parent.id).state) == "closed"
    assert str(quest(workspace, child).state) == "triaged"
