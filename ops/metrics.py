"""The Prometheus metrics, computed from the database at each scrape (docs/observability.md).

Nothing is counted in a process's memory: every gunicorn worker answers a scrape with the same
numbers, a restart loses none, and the figures are the ledger's own. Each family is one or two
aggregate queries over indexed columns; a scrape every 15 to 60 s costs little.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from django.utils import timezone
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from intake.hooks.models import RefusedDeliveries
from intake.otlp.models import MinuteCount, RefusedExports
from ledger.models import AuditEntry, InboundEvent, JournalReplica, Lease, Operation
from quests.models import Workspace

# Upper bounds of the effect latency histogram, in seconds: an effect is a Git read (ms), a
# push or a webhook (s), or an agent's job (minutes).
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)


def journal_push_lag(slugs: dict[int, str], now: datetime) -> Iterator[Metric]:
    """``ephyra_journal_push_lag_seconds``: how long the oldest transition not yet confirmed on
    the workspace's journal remote has waited, per workspace that names a remote (0 when
    everything is confirmed), from the worker's ``JournalReplica`` record
    (worker/replication.py; docs/operations.md, "Journal replication")."""
    lag = GaugeMetricFamily(
        "ephyra_journal_push_lag_seconds",
        "Age of the oldest journal transition not yet confirmed on the workspace's journal "
        "remote (0 when all are pushed).",
        labels=["workspace"],
    )
    replicated = Workspace.objects.exclude(journal_remote="").values_list("pk", flat=True)
    replicas = {r.pk: r for r in JournalReplica.objects.filter(pk__in=list(replicated))}
    for pk in sorted(replicated, key=lambda pk: slugs.get(pk, "?")):
        replica = replicas.get(pk)
        lag.add_metric([slugs.get(pk, "?")], replica.lag_seconds(now) if replica else 0.0)
    yield lag


class EphyraCollector(Collector):
    """Every Ephyra metric, read from the database when Prometheus scrapes."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        slugs = dict(Workspace.objects.values_list("pk", "slug"))
        yield from _signals(slugs, now)
        yield from _events(slugs)
        yield from _effects(slugs)
        yield from _leases(slugs, now)
        yield from journal_push_lag(slugs, now)


def _signals(slugs: dict[int, str], now: datetime) -> Iterator[Metric]:
    received = CounterMetricFamily(
        "ephyra_signals_received",
        "Signals (log records and span events) stored from OTLP exports, muted ones included.",
        labels=["workspace"],
    )
    totals = MinuteCount.objects.values("workspace").annotate(n=Sum("signals"))
    for row in totals.order_by("workspace"):
        received.add_metric([slugs.get(row["workspace"], "?")], row["n"] or 0)
    yield received

    refused = CounterMetricFamily(
        "ephyra_otlp_exports_rejected",
        "OTLP exports refused, by reason (throttled, unauthenticated, too_large, …).",
        labels=["reason"],
    )
    reasons = RefusedExports.objects.values("reason").annotate(n=Sum("exports"))
    for row in reasons.order_by("reason"):
        refused.add_metric([row["reason"]], row["n"] or 0)
    yield refused

    deliveries = CounterMetricFamily(
        "ephyra_webhook_deliveries_rejected",
        "Forge webhook deliveries refused, by forge and reason (unauthenticated: a bad "
        "signature or token, not_found: no such hook, too_large, bad_request, …).",
        labels=["forge", "reason"],
    )
    counts = RefusedDeliveries.objects.values("forge", "reason").annotate(n=Sum("deliveries"))
    for row in counts.order_by("forge", "reason"):
        deliveries.add_metric([row["forge"], row["reason"]], row["n"] or 0)
    yield deliveries

    # The last whole minute: the current one is still filling.
    minute = now.astimezone(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    rate = GaugeMetricFamily(
        "ephyra_ingest_records_per_second",
        "Signals stored per second over the last whole minute.",
        labels=["workspace"],
    )
    last = dict(
        MinuteCount.objects.filter(minute=minute)
        .values("workspace")
        .annotate(n=Sum("signals"))
        .values_list("workspace", "n")
    )
    for pk, slug in sorted(slugs.items(), key=lambda item: item[1]):
        rate.add_metric([slug], (last.get(pk) or 0) / 60)
    yield rate


def _events(slugs: dict[int, str]) -> Iterator[Metric]:
    submitted = CounterMetricFamily(
        "ephyra_inbound_events",
        "Events submitted to a workspace's worker, by what became of them "
        "(applied, refused, dead; pending are in ephyra_queue_depth).",
        labels=["workspace", "state"],
    )
    pending = {}
    rows = InboundEvent.objects.values("workspace", "state").annotate(n=Count("pk"))
    for row in rows.order_by("workspace", "state"):
        if row["state"] == InboundEvent.State.PENDING:
            pending[row["workspace"]] = row["n"]
            continue
        submitted.add_metric([slugs.get(row["workspace"], "?"), row["state"]], row["n"])
    yield submitted

    transitions = CounterMetricFamily(
        "ephyra_transitions",
        "Transitions applied to quests (their audit entries): submitted events and effect "
        "outcomes alike.",
        labels=["workspace"],
    )
    audited = AuditEntry.objects.filter(action__startswith="quest.").values("workspace")
    for row in audited.annotate(n=Count("pk")).order_by("workspace"):
        transitions.add_metric([slugs.get(row["workspace"], "?")], row["n"])
    yield transitions

    waiting = dict(
        Operation.objects.filter(state=Operation.State.PENDING)
        .values("workspace")
        .annotate(n=Count("pk"))
        .values_list("workspace", "n")
    )
    depth = GaugeMetricFamily(
        "ephyra_queue_depth",
        "Work waiting for a workspace's worker: submitted events not yet applied (events), "
        "effects not yet delivered (operations).",
        labels=["workspace", "queue"],
    )
    for pk, slug in sorted(slugs.items(), key=lambda item: item[1]):
        depth.add_metric([slug, "events"], pending.get(pk, 0))
        depth.add_metric([slug, "operations"], waiting.get(pk, 0))
    yield depth


def _effects(slugs: dict[int, str]) -> Iterator[Metric]:
    State = Operation.State
    effects = GaugeMetricFamily(
        "ephyra_effects",
        "Operations (effects) in the ledger, by type and state.",
        labels=["type", "state"],
    )
    by_state: dict[tuple[int, str], int] = {}
    rows = Operation.objects.values("workspace", "type", "state").annotate(n=Count("pk"))
    totals: dict[tuple[str, str], int] = {}
    for row in rows:
        key = (row["type"], row["state"])
        totals[key] = totals.get(key, 0) + row["n"]
        by_state[(row["workspace"], row["state"])] = (
            by_state.get((row["workspace"], row["state"]), 0) + row["n"]
        )
    for (kind, state), n in sorted(totals.items()):
        effects.add_metric([kind, state], n)
    yield effects

    ambiguous = GaugeMetricFamily(
        "ephyra_ambiguous_operations",
        "Writes whose outcome nobody can tell yet: each waits for its check or a person.",
        labels=["workspace"],
    )
    dead = GaugeMetricFamily(
        "ephyra_dead_letters",
        "Operations out of deliveries and submitted events the worker gave up on.",
        labels=["workspace", "kind"],
    )
    dead_events = dict(
        InboundEvent.objects.filter(state=InboundEvent.State.DEAD)
        .values("workspace")
        .annotate(n=Count("pk"))
        .values_list("workspace", "n")
    )
    for pk, slug in sorted(slugs.items(), key=lambda item: item[1]):
        ambiguous.add_metric([slug], by_state.get((pk, State.AMBIGUOUS), 0))
        dead.add_metric([slug, "operation"], by_state.get((pk, State.DEAD), 0))
        dead.add_metric([slug, "event"], dead_events.get(pk, 0))
    yield ambiguous
    yield dead
    yield _latency()


def _latency() -> Metric:
    """The time from claim to recorded outcome of finished operations, by type: one query of
    conditional counts, a bucket each."""
    duration = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    finished = Operation.objects.filter(finished_at__isnull=False, started_at__isnull=False)
    aggregates = {
        f"le{i}": Count("pk", filter=Q(duration__lte=timedelta(seconds=bound)))
        for i, bound in enumerate(LATENCY_BUCKETS)
    }
    rows = (
        finished.annotate(duration=duration)
        .values("type")
        .annotate(total=Count("pk"), seconds=Sum("duration"), **aggregates)
        .order_by("type")
    )
    family = HistogramMetricFamily(
        "ephyra_effect_duration_seconds",
        "Time from an effect's claim to its recorded outcome (the last delivery), by type.",
        labels=["type"],
    )
    for row in rows:
        buckets = [(str(b), row[f"le{i}"]) for i, b in enumerate(LATENCY_BUCKETS)]
        buckets.append(("+Inf", row["total"]))
        seconds = row["seconds"].total_seconds() if row["seconds"] else 0.0
        family.add_metric([row["type"]], buckets, seconds)
    return family


def _leases(slugs: dict[int, str], now: datetime) -> Iterator[Metric]:
    holder = GaugeMetricFamily(
        "ephyra_lease_holder",
        "1 for the worker holding a workspace's lease (unexpired), by owner.",
        labels=["workspace", "owner"],
    )
    age = GaugeMetricFamily(
        "ephyra_lease_heartbeat_age_seconds",
        "Seconds since the lease holder's last heartbeat.",
        labels=["workspace"],
    )
    held = GaugeMetricFamily(
        "ephyra_lease_held",
        "1 when a worker holds the workspace's lease and it has not expired, else 0.",
        labels=["workspace"],
    )
    leases = {lease.workspace_id: lease for lease in Lease.objects.all()}
    for pk, slug in sorted(slugs.items(), key=lambda item: item[1]):
        lease = leases.get(pk)
        live = bool(lease and lease.owner and lease.expires_at and lease.expires_at > now)
        held.add_metric([slug], 1 if live else 0)
        if live:
            holder.add_metric([slug, lease.owner], 1)
        if lease and lease.heartbeat_at:
            age.add_metric([slug], max(0.0, (now - lease.heartbeat_at).total_seconds()))
    yield holder
    yield held
    yield age
