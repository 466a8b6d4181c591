"""From a production error to a reverted culprit, with nothing between but Ephyra: the shop
runs as "production" in a process of its own, its request fails, the OpenTelemetry SDK in that
process exports the traceback as an OTLP log to a live Ephyra server, intake opens the quest,
and the worker (no model configured) researches, reproduces, bisects and reverts, stopping at A
and B for a person who approves through the action layer. Locally and in the sandbox."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from intake.otlp.models import IngestedSignal
from intake.otlp.tokens import token_create
from quests.models import Quest
from tests.agent.repos import git
from tests.runner.conftest import SANDBOX_PROBLEM
from tests.work.test_steps import approve, quest_event, reached, shop_workspace, worker  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

# The shop in production: the checkout page of the deployed head, instrumented with the
# OpenTelemetry SDK the way an application is, logging the exception it cannot handle.
PRODUCTION = textwrap.dedent(
    """
    import logging, sys
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    url, token = sys.argv[1], sys.argv[2]
    provider = LoggerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(
        OTLPLogExporter(endpoint=f"{url}/v1/logs", headers={"Authorization": f"Bearer {token}"})
    ))
    log = logging.getLogger("shop.web")
    log.addHandler(LoggingHandler(logger_provider=provider))
    from shop.views import checkout
    try:
        checkout({"lines": [{"price": 3}]})
    except Exception:
        log.exception("checkout failed")
    provider.shutdown()
    """
)


def production_fails(live_server, workspace, shop, tmp_path) -> None:
    """Deploy the shop's head in a directory of its own and let one checkout fail there."""
    deployed = tmp_path / "production"
    git(tmp_path, "clone", "--quiet", str(shop.path), str(deployed))
    token = token_create(workspace, name="production")[1]
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", PRODUCTION, live_server.url, token],
        cwd=deployed,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("runner", ["local", "sandbox"])
def test_a_production_traceback_over_otlp_becomes_a_reverted_culprit(
    live_server, tmp_path, settings, worker, runner  # noqa: F811
):
    if runner == "sandbox":
        if SANDBOX_PROBLEM:
            pytest.skip(SANDBOX_PROBLEM)
        # The sandbox shows the system and the worktree only: this test's Python lives elsewhere.
        settings.EPHYRA_SANDBOX_PATHS = sorted({sys.prefix, sys.base_prefix})
    shop, workspace = shop_workspace(tmp_path, settings, runner=runner)
    assert len(shop.main) >= 20

    production_fails(live_server, workspace, shop, tmp_path)

    signal = IngestedSignal.objects.get()
    assert (signal.exception_type, signal.source) == ("KeyError", "log")
    assert signal.frames[0]["function"] == "line_total"

    quest = reached("hypothesised")
    assert quest.quest_id == signal.quest_id
    research = quest_event(quest, "hypothesis_written")["evidence"]
    assert "shop/cart.py" in json.dumps(research)  # the frames were mapped to the repository
    approve(quest, "A")

    quest = reached("planned")
    recorded = quest_event(quest, "reproduction_recorded")
    assert "test_a_line_without_quantity_counts_once" in recorded["probe"]  # the failing test
    assert recorded["evidence"]["culprit"] == shop.culprit  # located by bisect
    approve(quest, "B")

    quest = reached("ready")  # the revert is proven, and C waits for a person
    branch = f"refs/heads/ephyra/{quest.quest_id}/r1"
    head = git(shop.path, "--git-dir", workspace.repository, "rev-parse", branch)
    assert head == quest.data["patch_head"]
    message = git(shop.path, "--git-dir", workspace.repository, "log", "-1", "--format=%B", head)
    assert f"This reverts commit {shop.culprit}" in message
    assert Quest.objects.count() == 1
