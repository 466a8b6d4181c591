"""The first signal of a new version is its deployment: the OpenTelemetry SDK of a service
that names its commit in a resource attribute, exporting to a live Ephyra."""

from __future__ import annotations

import logging
import warnings

import pytest
from django.utils import timezone
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from ephyra.telemetry import PROTOBUF, parse_logs
from intake.deployments import otlp
from intake.deployments.otlp import deployments_from_signals
from intake.models import Deployment, IngestedSignal
from intake.otlp.tokens import token_create
from tests.telemetry.otel import log_request, raised
from tests.watch.conftest import git, landed, quest, settle

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token(shop, monkeypatch) -> str:
    monkeypatch.setattr(otlp, "_seen", set())  # commits repeat between tests' repositories
    return token_create(shop, name="sdk")[1]


def export(url: str, token: str, resource: dict[str, str]) -> None:
    """The service logs an exception through the SDK's OTLP/HTTP exporter."""
    exporter = OTLPLogExporter(
        endpoint=f"{url}/v1/logs", headers={"Authorization": f"Bearer {token}"}
    )
    provider = LoggerProvider(resource=Resource.create({"service.name": "shop", **resource}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = logging.getLogger("shop.cart")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`LoggingHandler`", DeprecationWarning)
        handler = LoggingHandler(logger_provider=provider)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            {}["quantity"]
        except KeyError as error:
            logger.exception("cart failed", exc_info=error)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        provider.shutdown()


def test_the_first_signal_of_a_new_version_is_its_deployment(
    live_server, repos, shop, worker, token
):
    head = landed(shop, repos, worker)

    export(live_server.url, token, {"service.version": head})
    export(live_server.url, token, {"service.version": head})  # the same version again

    assert IngestedSignal.objects.count() == 2
    (row,) = Deployment.objects.all()
    assert (row.commit, row.environment, row.source, row.state, row.quests) == (
        head,
        "production",
        "otlp",
        "decided",
        ["q1"],
    )
    settle(worker)
    value = quest(shop)
    assert (value.deployed_commit, value.deployed_to) == (head, "production")


def test_a_version_that_is_not_a_commit_records_no_deployment(
    live_server, repos, shop, worker, token
):
    landed(shop, repos, worker)

    export(live_server.url, token, {"service.version": "1.4.2"})

    assert IngestedSignal.objects.count() == 1
    assert not Deployment.objects.exists()


def test_the_setting_names_the_attributes_that_carry_the_commit(
    live_server, repos, shop, worker, token, settings
):
    settings.EPHYRA_OTLP_VERSION_ATTRIBUTES = ["app.commit"]
    head = landed(shop, repos, worker)

    export(live_server.url, token, {"service.version": head})  # not named by the setting
    assert not Deployment.objects.exists()
    export(
        live_server.url,
        token,
        {"app.commit": head, "deployment.environment.name": "staging"},
    )

    (row,) = Deployment.objects.all()
    assert (row.commit, row.environment, row.quests) == (head, "staging", [])


def candidates(resource: dict[str, str], n: int = 200):
    """``n`` error signals of a service with ``resource``, as the receiver parses them."""
    error = raised(lambda: {}["quantity"])

    def emit(log):
        for _ in range(n):
            log.emit(severity_number=SeverityNumber.ERROR, body="cart failed", exception=error)

    body = log_request(emit, {"service.name": "shop", **resource}).SerializeToString()
    return parse_logs(body, PROTOBUF).candidates


def test_signals_whose_version_is_no_commit_cost_no_query(shop, django_assert_num_queries):
    plain = candidates({"service.version": "1.4.2", "vcs.ref.head.revision": "main"})
    with django_assert_num_queries(0):
        assert deployments_from_signals(shop, plain, timezone.now()) == 0


def test_a_commit_is_recorded_once_however_many_exports_carry_it(shop, token, repos):
    commit = git(repos.mirror, "rev-parse", "refs/heads/main")
    running = candidates({"vcs.ref.head.revision": commit, "service.version": "1.4.2"}, n=3)
    recorded = [deployments_from_signals(shop, running, timezone.now()) for _ in range(3)]
    assert recorded == [1, 0, 0]
    (row,) = Deployment.objects.all()
    assert (row.commit, row.source, row.state) == (commit, "otlp", "decided")
