"""Two exports of a new error routed at the same instant, in two connections: one opens the
quest and the other merges into it, where each alone would have opened its own."""

from __future__ import annotations

import contextlib
import hashlib
import threading
from datetime import UTC, datetime

import pytest
from django.db import connection, transaction
from django.test import Client

from ephyra.telemetry import parse_logs
from intake.grouping import Router
from intake.locks import hold
from intake.otlp import services as otlp_services
from intake.otlp.models import IngestedSignal, MergeWindow
from intake.otlp.services import signals_receive
from intake.otlp.tokens import token_create
from journal.store import Journal
from ledger.models import InboundEvent
from quests.engine import quest_apply
from quests.models import Workspace
from tests.core.story import Story
from tests.intake.test_otlp_refusals import PROTOBUF, post
from tests.intake.test_triage_routes import CART, ORDERS, export, fingerprint_of

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("committed"),
    pytest.mark.skipif(
        connection.vendor == "sqlite",
        # SQLite's transactions begin IMMEDIATE: the second export cannot read before the first
        # commits, so the two cannot both see "no quest" (and the shared in-memory test database
        # fails a second writer at once instead of making it wait).
        reason="needs a database with concurrent writers: run with DATABASE_URL=postgres://…",
    ),
]
AT = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "mirror.git"
    Journal.init(path, bare=True)
    return Workspace.objects.create(slug="shop", name="Shop", repository=str(path))


def receive_at_once(monkeypatch, workspace, bodies: list[bytes]) -> list[str]:
    """Each body received in its own thread (its own connection), every thread's first read of
    the workspace's state made before any of them goes on: the race, every time, unless a lock
    taken before that read keeps a thread from getting there (then the others go on after two
    seconds). Returns what went wrong in the threads (nothing, when all is well)."""
    token = token_create(workspace, name="race")[0]
    start = threading.Barrier(len(bodies))
    local = threading.local()
    real = Router.__init__

    def first_read_then_wait(self, *args, **kwargs):
        real(self, *args, **kwargs)
        if not getattr(local, "waited", False):
            local.waited = True
            # A thread held before its read breaks the barrier: that is the point of the lock.
            with contextlib.suppress(threading.BrokenBarrierError):
                start.wait(timeout=2)

    monkeypatch.setattr(otlp_services.Router, "__init__", first_read_then_wait)
    errors: list[str] = []

    def receive(body: bytes) -> None:
        try:
            signals_receive(
                token,
                parse_logs(body, PROTOBUF),
                body_digest=hashlib.sha256(body).hexdigest(),
                received_at=AT,
            )
        except Exception as error:  # reported by the test, not lost in the thread
            errors.append(repr(error))
        finally:
            connection.close()

    threads = [threading.Thread(target=receive, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return errors


def events(workspace) -> list[str]:
    """What each stored signal became, sorted."""
    signals = IngestedSignal.objects.filter(workspace=workspace)
    return sorted(signals.values_list("event", flat=True))


def test_two_exports_of_a_new_error_at_once_open_one_quest(monkeypatch, workspace):
    errors = receive_at_once(
        monkeypatch, workspace, [export(CART, "'sku-1'"), export(CART, "'sku-2'", "'sku-3'")]
    )

    assert errors == []
    assert events(workspace) == ["signal_merged", "signal_merged", "signal_sensed"]
    signals = IngestedSignal.objects.filter(workspace=workspace)
    assert len(set(signals.values_list("quest_id", flat=True))) == 1
    types = sorted(InboundEvent.objects.values_list("type", flat=True))
    assert types == ["signal_merged", "signal_sensed"]
    assert len(set(InboundEvent.objects.values_list("quest_id", flat=True))) == 1
    # Whichever opened it, the two repeats are counted: in the merge event, or held for the
    # quest's next one (the second export's came within the merge window of the first's).
    merged = InboundEvent.objects.get(type="signal_merged").payload["count"]
    assert merged + MergeWindow.objects.get().held == 2


def test_exports_of_different_new_errors_at_once_each_open_their_own(monkeypatch, workspace):
    errors = receive_at_once(
        monkeypatch, workspace, [export(CART, "'sku-1'"), export(ORDERS, "no lines")]
    )

    assert errors == []
    assert events(workspace) == ["signal_sensed", "signal_sensed"]
    signals = IngestedSignal.objects.filter(workspace=workspace)
    assert len(set(signals.values_list("quest_id", flat=True))) == 2


def test_exports_merging_into_one_quest_at_once_count_every_repeat_once(monkeypatch, workspace):
    story = Story("q-cart")
    quest_apply(workspace, story.signal(fingerprint=fingerprint_of(CART)))
    bodies = [export(CART, f"'sku-{n}a'", f"'sku-{n}b'", f"'sku-{n}c'") for n in range(4)]

    errors = receive_at_once(monkeypatch, workspace, bodies)

    assert errors == []
    assert events(workspace) == ["signal_merged"] * 12
    # The first to commit sends one event for its three; the others, inside its merge window,
    # are held for the quest's next one: every repeat counted once, in one or the other.
    (merged,) = InboundEvent.objects.filter(type="signal_merged")
    assert merged.payload["count"] == 3
    assert MergeWindow.objects.get(quest_id="q-cart").held == 9


def test_an_export_and_its_retry_at_once_are_stored_once(monkeypatch, workspace):
    # The fingerprint has a quest already: merging takes no fingerprint lock, so only the
    # export's own identity keeps the retry from inserting the same signal ids again.
    token = token_create(workspace, name="first")[0]
    first = export(CART, "'sku-0'")
    digest = hashlib.sha256(first).hexdigest()
    signals_receive(token, parse_logs(first, PROTOBUF), body_digest=digest, received_at=AT)
    body = export(CART, "'sku-1'", "'sku-2'")

    errors = receive_at_once(monkeypatch, workspace, [body, body])

    assert errors == []
    assert events(workspace) == ["signal_merged", "signal_merged", "signal_sensed"]
    assert list(InboundEvent.objects.values_list("type", flat=True).order_by("pk")) == [
        "signal_sensed",
        "signal_merged",
    ]
    assert InboundEvent.objects.get(type="signal_merged").payload["count"] == 2


def test_a_quest_closed_between_an_exports_two_reads_is_opened_once(monkeypatch, workspace):
    # Export A holds a new error (ORDERS) and one whose quest is open (CART) when it first
    # reads. The quest is killed before A reads again, so A opens CART's next quest; export B,
    # CART alone, arrives before A commits. Had A held only what it first saw unopened, B
    # would take CART's lock freely and open a second quest beside A's.
    cart = fingerprint_of(CART)
    story = Story("q-cart")
    quest_apply(workspace, story.signal(fingerprint=cart))
    token = token_create(workspace, name="race")[0]
    first_read, killed, second_read, b_done = (threading.Event() for _ in range(4))
    reads = {"n": 0}
    real = Router.__init__

    def pausing(self, *args, **kwargs):
        real(self, *args, **kwargs)
        if threading.current_thread().name != "A":
            return
        reads["n"] += 1
        if reads["n"] == 1:
            first_read.set()
            killed.wait(timeout=10)
        elif reads["n"] == 2:
            second_read.set()
            b_done.wait(timeout=2)  # B finishes at once if nothing holds CART for A

    monkeypatch.setattr(otlp_services.Router, "__init__", pausing)
    errors: list[str] = []

    def receive(body: bytes, done: threading.Event | None = None) -> None:
        try:
            result = parse_logs(body, PROTOBUF)
            digest = hashlib.sha256(body).hexdigest()
            signals_receive(token, result, body_digest=digest, received_at=AT)
        except Exception as error:  # reported by the test, not lost in the thread
            errors.append(repr(error))
        finally:
            connection.close()
            if done is not None:
                done.set()

    both = export(CART, "'sku-1'") + export(ORDERS, "no lines")  # two messages merge
    a = threading.Thread(target=receive, args=(both,), name="A")
    a.start()
    assert first_read.wait(timeout=10)
    quest_apply(workspace, story("killed", reason="a person stopped it"))
    killed.set()
    assert second_read.wait(timeout=10)
    b = threading.Thread(target=receive, args=(export(CART, "'sku-2'"), b_done), name="B")
    b.start()
    for thread in (a, b):
        thread.join(timeout=30)

    assert errors == []
    cart_signals = IngestedSignal.objects.filter(workspace=workspace, fingerprint=cart)
    assert sorted(cart_signals.values_list("event", flat=True)) == [
        "signal_merged",
        "signal_sensed",
    ]
    assert len(set(cart_signals.values_list("quest_id", flat=True))) == 1


def test_an_export_kept_waiting_past_its_bound_is_answered_503_and_taken_later(workspace, settings):
    settings.EPHYRA_OTLP_LOCK_WAIT_MS = 200
    token = token_create(workspace, name="wait")[1]
    body = export(CART, "'sku-1'")
    held, release = threading.Event(), threading.Event()

    def hold_the_export() -> None:  # as a first attempt still being stored would
        try:
            with transaction.atomic():
                hold(workspace, "export", [hashlib.sha256(body).hexdigest()])
                held.set()
                release.wait(timeout=10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_export)
    holder.start()
    try:
        assert held.wait(timeout=10)
        waited = post(Client(), body, token=token)
    finally:
        release.set()
        holder.join(timeout=10)

    assert (waited.status_code, waited["Retry-After"]) == (503, "5")
    assert (IngestedSignal.objects.count(), InboundEvent.objects.count()) == (0, 0)
    assert post(Client(), body, token=token).status_code == 200
    assert (IngestedSignal.objects.count(), InboundEvent.objects.count()) == (1, 1)


def test_locks_are_taken_in_one_order_whatever_order_the_names_come_in(workspace):
    # Another transaction holds the lock that sorts last; a caller asking for both, last first,
    # must wait for it holding the first: had it asked in the order given, it would hold
    # nothing, and a third caller asking first-then-last could close a cycle.
    from intake.locks import _key

    names = sorted(["a", "b", "c", "d"], key=lambda n: _key(workspace.pk, "fingerprint", n))
    first, last = names[0], names[-1]
    held, release, asked = threading.Event(), threading.Event(), threading.Event()
    waiter_pid: list[int] = []

    def holder() -> None:
        try:
            with transaction.atomic():
                hold(workspace, "fingerprint", [last])
                held.set()
                release.wait(timeout=10)
        finally:
            connection.close()

    def waiter() -> None:
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    waiter_pid.append(cursor.fetchone()[0])
                asked.set()
                hold(workspace, "fingerprint", [last, first])
        finally:
            connection.close()

    threads = [threading.Thread(target=holder), threading.Thread(target=waiter)]
    threads[0].start()
    assert held.wait(timeout=10)
    threads[1].start()
    try:
        assert asked.wait(timeout=10)
        granted: list[bool] = []
        for _ in range(100):  # until the waiter is blocked on its second lock
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT granted FROM pg_locks WHERE locktype = 'advisory' AND pid = %s "
                    "ORDER BY granted DESC",
                    [waiter_pid[0]],
                )
                granted = [row[0] for row in cursor.fetchall()]
            if False in granted:
                break
            threading.Event().wait(0.05)
        assert granted == [True, False]  # the first name's lock held, the last's awaited
    finally:
        release.set()
        for thread in threads:
            thread.join(timeout=10)
