"""/metrics through a real HTTP server, parsed with prometheus-client's own parser: every
family reads the rows the database holds, and nobody reads them without the token."""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import UTC, timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from intake.models import Hook, WebhookDelivery
from intake.otlp.models import MinuteCount
from journal.store import Journal
from ledger.models import InboundEvent, Lease, Operation
from quests.engine import quest_apply
from quests.models import Quest, Workspace
from tests.audit_tampering import erase_audit_log
from tests.core.story import Story

TOKEN = "metrics-token-for-tests-0123456789"


def scrape(url: str, token: str | None = None, **headers: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) → value, for every sample of every family."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def _quest(workspace: Workspace, quest_id: str, revision: int) -> Quest:
    now = timezone.now()
    return Quest.objects.create(
        workspace=workspace,
        quest_id=quest_id,
        state="sensed",
        revision=revision,
        fingerprint=f"fp-{quest_id}",
        severity="error",
        created_at=now,
        updated_at=now,
        journal_head="0" * 40,
        data={},
    )


def _event(workspace: Workspace, n: int, state: str) -> None:
    InboundEvent.objects.create(
        workspace=workspace,
        event_id=f"ev-{n}",
        quest_id="q1",
        type="signal_merged",
        payload={},
        source="test",
        state=state,
    )


def _operation(workspace: Workspace, key: str, kind: str, state: str, seconds: float | None):
    started = timezone.now() - timedelta(minutes=5)
    Operation.objects.create(
        key=key,
        workspace=workspace,
        quest_id="q1",
        type=kind,
        state=state,
        journal_commit="0" * 40,
        started_at=started if seconds is not None else None,
        finished_at=started + timedelta(seconds=seconds) if seconds is not None else None,
    )


@pytest.fixture
def seeded(transactional_db, tmp_path):
    # Transitions through the engine, in a workspace of their own: two of them.
    Journal.init(tmp_path / "docs.git", bare=True)
    docs = Workspace.objects.create(slug="docs", name="Docs", repository=str(tmp_path / "docs.git"))
    story = Story("d1")
    quest_apply(docs, story.signal())
    quest_apply(docs, story("triage_decided", route="human", risk="low"))
    quest_apply(docs, story("landed", commit="f" * 40))  # refused: no transition
    shop = Workspace.objects.create(slug="shop", name="Shop", repository="/nonexistent/shop.git")
    blog = Workspace.objects.create(slug="blog", name="Blog", repository="/nonexistent/blog.git")
    _quest(shop, "q1", 3)
    _quest(shop, "q2", 5)
    _quest(blog, "q3", 1)
    for n, state in enumerate(["applied"] * 3 + ["refused", "dead", "pending", "pending"]):
        _event(shop, n, state)
    _operation(shop, "k-fast", "triage", "succeeded", 0.2)
    _operation(shop, "k-slow", "triage", "failed", 3.0)
    _operation(shop, "k-land", "land", "ambiguous", None)
    _operation(shop, "k-dead", "notify", "dead", None)
    _operation(shop, "k-wait1", "run_proof", "pending", None)
    _operation(shop, "k-wait2", "run_proof", "pending", None)
    now = timezone.now()
    # The same count in this minute and the one before: whichever is the last whole minute
    # when the scrape arrives, it held 120 signals.
    minute = now.astimezone(UTC).replace(second=0, microsecond=0)
    for at in (minute - timedelta(minutes=1), minute):
        MinuteCount.objects.create(workspace=shop, fingerprint="fp-a", minute=at, signals=120)
    MinuteCount.objects.create(
        workspace=blog, fingerprint="fp-b", minute=minute - timedelta(hours=2), signals=7
    )
    Lease.objects.create(
        workspace=shop,
        owner="host-a:123",
        generation=4,
        heartbeat_at=now - timedelta(seconds=42),
        expires_at=now + timedelta(seconds=30),
    )
    Lease.objects.create(
        workspace=blog,
        owner="host-b:9",
        generation=1,
        heartbeat_at=now - timedelta(hours=1),
        expires_at=now - timedelta(minutes=59),
    )
    yield shop, blog
    erase_audit_log()


def test_a_scrape_with_the_token_reports_what_the_database_holds(seeded, live_server, settings):
    settings.EPHYRA_METRICS_TOKEN = TOKEN
    status, text = scrape(f"{live_server.url}/metrics", TOKEN)
    assert status == 200
    got = samples(text)

    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    assert value("ephyra_signals_received_total", workspace="shop") == 240
    assert value("ephyra_signals_received_total", workspace="blog") == 7
    assert value("ephyra_ingest_records_per_second", workspace="shop") == 2.0
    assert value("ephyra_ingest_records_per_second", workspace="blog") == 0
    assert value("ephyra_inbound_events_total", workspace="shop", state="applied") == 3
    assert value("ephyra_inbound_events_total", workspace="shop", state="refused") == 1
    assert value("ephyra_inbound_events_total", workspace="shop", state="dead") == 1
    assert value("ephyra_transitions_total", workspace="docs") == 2
    assert ("ephyra_transitions_total", (("workspace", "shop"),)) not in got
    assert value("ephyra_queue_depth", workspace="shop", queue="events") == 2
    assert value("ephyra_queue_depth", workspace="shop", queue="operations") == 2
    assert value("ephyra_queue_depth", workspace="blog", queue="events") == 0
    assert value("ephyra_effects", type="triage", state="succeeded") == 1
    assert value("ephyra_effects", type="run_proof", state="pending") == 2
    assert value("ephyra_ambiguous_operations", workspace="shop") == 1
    assert value("ephyra_dead_letters", workspace="shop", kind="operation") == 1
    assert value("ephyra_dead_letters", workspace="shop", kind="event") == 1
    assert value("ephyra_dead_letters", workspace="blog", kind="operation") == 0
    # Latency of the two finished triage effects: 0.2 s and 3 s.
    assert value("ephyra_effect_duration_seconds_bucket", type="triage", le="0.1") == 0
    assert value("ephyra_effect_duration_seconds_bucket", type="triage", le="0.25") == 1
    assert value("ephyra_effect_duration_seconds_bucket", type="triage", le="5.0") == 2
    assert value("ephyra_effect_duration_seconds_bucket", type="triage", le="+Inf") == 2
    assert value("ephyra_effect_duration_seconds_count", type="triage") == 2
    assert value("ephyra_effect_duration_seconds_sum", type="triage") == pytest.approx(3.2)
    # The shop's lease is held by host-a; the blog's expired an hour ago.
    assert value("ephyra_lease_holder", workspace="shop", owner="host-a:123") == 1
    assert ("ephyra_lease_holder", (("owner", "host-b:9"), ("workspace", "blog"))) not in got
    assert value("ephyra_lease_held", workspace="shop") == 1
    assert value("ephyra_lease_held", workspace="blog") == 0
    assert 42 <= value("ephyra_lease_heartbeat_age_seconds", workspace="shop") < 100
    assert value("ephyra_lease_heartbeat_age_seconds", workspace="blog") >= 3600


def test_a_refused_export_is_counted_by_its_reason(seeded, live_server, settings):
    settings.EPHYRA_METRICS_TOKEN = TOKEN
    before = samples(scrape(f"{live_server.url}/metrics", TOKEN)[1])
    key = ("ephyra_otlp_exports_rejected_total", (("reason", "unauthenticated"),))
    assert key not in before
    export = urllib.request.Request(
        f"{live_server.url}/v1/logs",
        data=b"{}",
        headers={"Content-Type": "application/json", "Authorization": "Bearer wrong"},
    )
    for _ in range(2):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(export, timeout=10)
        assert refused.value.code == 401
    after = samples(scrape(f"{live_server.url}/metrics", TOKEN)[1])
    assert after[key] == 2


def test_a_refused_webhook_delivery_is_counted_by_its_forge_and_reason(
    seeded, live_server, settings, monkeypatch
):
    # A bad signature and a hook that does not exist: what an operator watches for when
    # someone guesses at the webhooks, or a forge's secret was changed on one side only.
    settings.EPHYRA_METRICS_TOKEN = TOKEN
    monkeypatch.setenv("HOOK_SECRET", "the-forge-secret")
    hook = Hook.objects.create(
        workspace=Workspace.objects.get(slug="docs"), kind="github", secret_ref="env:HOOK_SECRET"
    )
    body = b'{"zen": "Keep it logically awesome."}'
    for slug in (hook.workspace.slug, hook.workspace.slug, "nowhere"):
        delivery = urllib.request.Request(
            f"{live_server.url}/hooks/github/{slug}",
            data=body,
            headers={
                "Content-Type": "application/json",
                "X-GitHub-Event": "ping",
                "X-GitHub-Delivery": "d-1",
                "X-Hub-Signature-256": "sha256=" + "0" * 64,
            },
        )
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(delivery, timeout=10)
    got = samples(scrape(f"{live_server.url}/metrics", TOKEN)[1])
    rejected = "ephyra_webhook_deliveries_rejected_total"
    assert got[(rejected, (("forge", "github"), ("reason", "unauthenticated")))] == 2
    assert got[(rejected, (("forge", "github"), ("reason", "not_found")))] == 1
    assert not WebhookDelivery.objects.exists()


def test_without_the_token_or_with_a_wrong_one_the_answer_is_401(seeded, live_server, settings):
    settings.EPHYRA_METRICS_TOKEN = TOKEN
    for token in (None, "wrong", TOKEN + "x", ""):
        status, body = scrape(f"{live_server.url}/metrics", token)
        assert status == 401, token
        assert "ephyra_" not in body


def test_without_a_token_setting_only_this_host_is_answered(seeded, live_server, settings, client):
    settings.EPHYRA_METRICS_TOKEN = ""
    status, text = scrape(f"{live_server.url}/metrics")
    assert status == 200 and samples(text)[("ephyra_lease_held", (("workspace", "shop"),))] == 1
    # Through a reverse proxy on this host the request comes from 127.0.0.1 too, with its mark.
    status, body = scrape(f"{live_server.url}/metrics", **{"X-Forwarded-For": "203.0.113.9"})
    assert (status, "ephyra_" in body) == (403, False)
    answer = client.get("/metrics", REMOTE_ADDR="192.0.2.10")
    assert answer.status_code == 403
    assert b"ephyra_" not in answer.content
