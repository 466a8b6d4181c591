"""docs/alerts.yml loads as Prometheus rules and asks only for metrics /metrics exposes."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ops.metrics import EphyraCollector

RULES = Path(__file__).resolve().parents[2] / "docs" / "alerts.yml"


def exposed(db) -> set[str]:
    """Every sample name the collector writes, an empty database declaring each family."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EphyraCollector())
    text = generate_latest(registry).decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update({family.name + suffix for suffix in ("_total", "_bucket", "_sum", "_count")})
    return names


def test_every_alert_expression_names_only_metrics_the_endpoint_exposes(db):
    rules = yaml.safe_load(RULES.read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert len(alerts) >= 6
    names = exposed(db)
    for rule in alerts:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in {"page", "ticket"}
        assert re.fullmatch(r"\d+[smh]", rule["for"])
        metrics = set(re.findall(r"\bephyra_[a-z_]+", rule["expr"]))
        assert metrics, rule["alert"]
        assert metrics <= names, (rule["alert"], metrics - names)
    covered = " ".join(rule["expr"] for rule in alerts)
    for needed in (
        "ephyra_ambiguous_operations",
        "ephyra_dead_letters",
        "ephyra_lease_heartbeat_age_seconds",
        "ephyra_journal_push_lag_seconds",
        "ephyra_otlp_exports_rejected_total",
        "ephyra_queue_depth",
    ):
        assert needed in covered
