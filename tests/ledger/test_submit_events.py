"""Many inbound events submitted at once (an OTLP export's): stored in their order, an event id
already stored left as it is, one doorbell; and the rows they and the signals go in by (COPY on
PostgreSQL) read back exactly as ``bulk_create`` would have stored them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ephyra import sql as statements
from ephyra.core.events import SignalMerged, SignalRef, event_to_dict
from ephyra.sql import insert_objects
from intake.otlp.models import IngestedSignal
from intake.otlp.tokens import token_create
from ledger import inbound
from ledger.inbound import submit_event, submit_events
from ledger.models import InboundEvent
from tests.engine.test_writes import AWKWARD

AT = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def merged(n: int, title: str = "KeyError: 'sku'") -> SignalMerged:
    ref = SignalRef(id=f"s{n}", fingerprint="fp", severity="error", title=title)
    return SignalMerged(id=f"merged-{n}", quest="q1", at=AT, signal=ref)


@pytest.fixture(params=["copy", "insert"])
def way(request, monkeypatch):
    """Both ways rows go in: COPY (PostgreSQL, from COPY_FROM rows) and INSERT."""
    monkeypatch.setattr(statements, "COPY_FROM", 1 if request.param == "copy" else 10**9)
    return request.param


def test_events_are_stored_in_their_order_with_one_doorbell(
    workspace, way, monkeypatch, django_capture_on_commit_callbacks
):
    rung: list[int] = []
    monkeypatch.setattr(inbound, "ring", rung.append)
    events = [merged(n) for n in (3, 1, 2)]
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        submit_events(workspace, events, source="otlp")
        assert rung == []  # on commit, not before
    assert len(callbacks) == 1 and rung == [workspace.pk]
    rows = InboundEvent.objects.order_by("id")
    assert [r.event_id for r in rows] == ["merged-3", "merged-1", "merged-2"]
    assert [r.payload for r in rows] == [event_to_dict(e) for e in events]
    assert {(r.type, r.source, r.state, r.quest_id) for r in rows} == {
        ("signal_merged", "otlp", "pending", "q1")
    }


def test_an_event_id_already_stored_is_left_as_it_is(workspace, way):
    first = submit_event(workspace, merged(1, title="the first"), source="webhook:github")
    again = [merged(0), merged(1, title="a second copy"), merged(2)]
    submit_events(workspace, again, source="otlp")
    assert InboundEvent.objects.count() == 4 - 1
    kept = InboundEvent.objects.get(event_id="merged-1")
    assert (kept.pk, kept.source, kept.payload) == (first.pk, first.source, first.payload)
    assert kept.payload["signal"]["title"] == "the first"


def test_rows_read_back_as_bulk_create_stores_them(workspace, way):
    token = token_create(workspace, name="t")[0]

    def signal(sid: str) -> IngestedSignal:
        return IngestedSignal(
            workspace=workspace,
            token=token,
            signal_id=sid,
            quest_id="q1",
            event=IngestedSignal.Event.MERGED,
            source="log",
            severity="error",
            fingerprint="fp",
            fingerprint_version=1,
            title=AWKWARD,
            message=AWKWARD + "\n" + AWKWARD,
            frames=[{"file": AWKWARD, "line": None, "function": "f", "in_app": True}],
            paths=["a\\b", "tab\tpath"],
            occurred_at=None,
            received_at=AT,
        )

    insert_objects([signal("ours-1"), signal("ours-2")])
    IngestedSignal.objects.bulk_create([signal("django-1")])
    fields = [
        f.name for f in IngestedSignal._meta.concrete_fields if f.name not in {"id", "signal_id"}
    ]
    values = {
        row.signal_id: [getattr(row, name) for name in fields]
        for row in IngestedSignal.objects.all()
    }
    assert values["ours-1"] == values["ours-2"] == values["django-1"]
    assert values["ours-1"][fields.index("title")] == AWKWARD
