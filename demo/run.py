"""One run of the demo, from an empty workspace to the quest's last state (docs/demo.md).

The demo is a client of a running Ephyra: production's logs reach the web server over OTLP/HTTP
(``--url``), the server's worker moves the quest, and the demo reads the database to follow it,
approve for ``--approve-as`` and report the deployments it makes.
"""

from __future__ import annotations

import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from django.utils import timezone

from demo.follow import DemoFailed, Follower
from demo.production import Production, Traffic
from demo.workspace import DemoWorkspace, demo_workspace, reviewer
from quests.models import Quest


@dataclass
class Options:
    scenario: str = "main"
    url: str = "http://127.0.0.1:8000"
    approve_as: str | None = None
    keep: bool = False
    timeout: float = 900
    watch_minutes: int = 1


class Demo:
    def __init__(self, options: Options, write: Callable[[str], None]):
        self.options = options
        self.url = options.url.rstrip("/")
        self.write = write
        self.started = time.monotonic()
        self.production: Production | None = None
        self.traffic: Traffic | None = None
        self.made: DemoWorkspace | None = None

    def say(self, text: str) -> None:
        self.write(f"[{time.monotonic() - self.started:6.1f}s] {text}")

    def run(self) -> Quest:
        """Run the scenario; the quest at its end. ``DemoFailed`` when it went elsewhere."""
        self.server_answers()
        try:
            return self._run()
        finally:
            self.stop()

    def _run(self) -> Quest:
        options = self.options
        made = self.made = demo_workspace(options.scenario, watch_minutes=options.watch_minutes)
        service, slug = made.service, made.workspace.slug
        self.say(
            f"workspace {slug}: the shop, {len(service.commits)} commits on main, remote "
            f"{service.remote}; policy approved (demo-ops proposed, demo-lead approved); "
            "an ingest token for production"
        )
        self.production = Production(
            remote=service.remote,
            checkout=made.home / "production",
            endpoint=self.url,
            token=made.token,
            log=made.home / "production.log",
        )
        self.production.deploy(service.head)
        self.say(
            f"production: the shop at {service.head[:12]} on 127.0.0.1:{self.production.port}, "
            f"its logs exported to {self.url}/v1/logs (OpenTelemetry SDK, OTLP/HTTP)"
        )
        self.traffic = Traffic(self.production)
        self.traffic.start()
        self.say("traffic: customers order, a few requests a second")
        approver = None
        if options.approve_as:
            approver = reviewer(options.approve_as, made.workspace)
        follower = Follower(
            workspace=made.workspace,
            say=self.say,
            approver=approver,
            quest_url=self.quest_url,
            deploy=self.deploy,
        )
        quest = follower.quest(timeout=120)
        errors = self.traffic.errors()
        self.say(
            f"signal: production answered 500 ({errors} so far); quest {quest.quest_id} opened: "
            f"{self.quest_url(quest)}"
        )
        if options.scenario == "rollback":
            quest = follower.until(lambda q: q.revision >= 2, options.timeout)
            self.say(
                f"rolled back: the quest is {quest.state} at revision {quest.revision}, with the "
                "failed fix and the watch's figures as evidence"
            )
            if quest.state == "closed":
                raise DemoFailed("the quest closed: the watch did not see the new errors")
        else:
            quest = follower.until(lambda q: q.state in {"closed"}, options.timeout)
            if quest.revision != 1:
                raise DemoFailed(f"the quest went to revision {quest.revision}: a rollback")
        self.say(f"done: {self.quest_url(quest)}")
        return quest

    def deploy(self, quest: Quest) -> None:
        """Deploy the landed commit as a small team would (restart production at the base's new
        head) and report the deployment to Ephyra."""
        commit = quest.data["landed_commit"]
        self.production.deploy(commit)
        decided = report_deployment(self.made.workspace, commit)
        self.say(f"deployed: production restarted at {commit[:12]}; the deployment: {decided}")

    def quest_url(self, quest: Quest) -> str:
        return f"{self.url}/q/{quest.workspace.slug}/{quest.quest_id}/"

    def server_answers(self, patience: float = 10) -> None:
        """The server answers (it may still be starting: a few seconds' patience)."""
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        raise DemoFailed(
            f"Ephyra does not answer at {self.url}: start it with `make run` in another "
            "terminal (or name its address with --url)"
        )

    def stop(self) -> None:
        if self.traffic is not None:
            self.traffic.stop()
        if self.production is None:
            return
        if self.options.keep:
            self.say(
                f"--keep: production still serves on 127.0.0.1:{self.production.port} "
                f"(pid {self.production.process.pid}); the demo's files are in {self.made.home}"
            )
            return
        self.production.stop()
        # The remote stays: it is the workspace's repository. The rest was the demo's scratch.
        for scratch in ("source", "production"):
            shutil.rmtree(self.made.home / scratch, ignore_errors=True)


def report_deployment(workspace, commit: str) -> str:
    """Tell Ephyra that ``commit`` runs in production, as ``manage.py deployed`` does (the
    deployment service, after a fetch of the remote); what it decided, in words."""
    from intake.deployments.services import deployment_record, mirror_fetch

    mirror_fetch(workspace)
    recorded = deployment_record(
        workspace,
        commit=commit,
        environment="production",
        source="command",
        at=timezone.now(),
        actor="ephyra:demo",
    )
    return f"{recorded.deployment.state}, {recorded.deployment.reason}"
