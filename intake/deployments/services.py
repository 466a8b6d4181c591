"""Deployments: the one writer of ``Deployment`` rows, and the decision of what each means for
the workspace's watching quests.

``deployment_record`` is where every source comes: a forge's webhook (``intake.hooks``), the
``deployed`` command of a CI/CD step, and the first OTLP signal of a new version
(``intake.deployments.otlp``). A deployment of a commit is recorded once per environment; a
production one is then *decided*: ``deployment_observed`` goes to each watching quest that has
seen no deployment yet and whose landed commit the deployed commit carries (Git ancestry in the
workspace's mirror). It stays ``pending``, with its reason, while a quest of the workspace is
still landing (the deployment may carry what it is landing) or while the mirror lacks a commit
it must compare; ``deployments_sweep``, on each pass of the worker, decides the latest pending
ones again, fetching the remote (at most once a minute) when a commit is missing. A deployment
to any other environment is recorded and opens no watch.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ephyra.core.events import DeploymentObserved
from ephyra.core.states import State
from ephyra.landing import NoAnswer
from ephyra.landing.remote import git
from ephyra.redaction.redact import redact
from ephyra.webhooks.facts import PRODUCTION_NAMES
from ephyra.webhooks.facts import Deployment as DeploymentFact
from ephyra.webhooks.webhooks import OpenQuest, deployed_landing
from intake.deployments.models import Deployment
from ledger.inbound import submit_event
from quests.models import Quest, Workspace
from quests.workspaces import commit_contains

log = logging.getLogger("ephyra.intake.deployments")
FETCH_EVERY_SECONDS = 60.0
FETCH_TIMEOUT = 120.0
SWEEP_LIMIT = 20  # the latest pending deployments decided again on each pass
GIVE_UP_AFTER = timedelta(hours=24)
# Where a fetch for deployments puts the remote's branches in the mirror: objects are what
# ancestry needs, and the mirror's own branches (some checked out in quest worktrees) stay.
FETCH_NAMESPACE = "refs/ephyra-deployments/heads/"

_fetched: dict[int, float] = {}  # workspace → when this process last fetched for a deployment
_fetched_lock = threading.Lock()


@dataclass(frozen=True)
class Decision:
    pending: bool
    reason: str
    # (quest, deployed commit, landed commit) for each quest the deployment carries out.
    hits: tuple[tuple[str, str, str], ...] = ()
    missing: bool = False  # a commit the mirror lacks: a fetch may help

    @property
    def quests(self) -> list[str]:
        return [quest for quest, _, _ in self.hits]


def is_production(environment: str) -> bool:
    return environment.strip().lower() in PRODUCTION_NAMES


@dataclass(frozen=True)
class Recorded:
    deployment: Deployment
    created: bool  # this report recorded it; a later report of the same changes nothing
    applied: tuple[str, ...]  # the quests told of it by this call


def deployment_record(
    workspace: Workspace,
    *,
    commit: str,
    environment: str = "production",
    source: str,
    at: datetime,
    actor: str = "ephyra",
    production: bool | None = None,
) -> Recorded:
    """Record a deployment (once per commit and environment; a second report of it changes
    nothing) and, when it is new or still pending, decide it now, without fetching."""
    environment = redact(environment.strip())[:200] or "production"
    if production is None:
        production = is_production(environment)
    now = timezone.now()
    with transaction.atomic():
        row, created = Deployment.objects.get_or_create(
            workspace=workspace,
            commit=commit.lower(),
            environment=environment,
            defaults={
                "production": production,
                "source": source[:40],
                "actor": actor[:200] or "ephyra",
                "at": at,
                "recorded_at": now,
                "reason": "not decided yet",
            },
        )
        applied: tuple[str, ...] = ()
        if row.state == Deployment.State.PENDING:
            row, applied = _decide(row, now)
    log.info("deployment of %s to %s (%s): %s", commit, environment, source, row.reason)
    return Recorded(row, created, applied)


def _decide(
    row: Deployment, now: datetime, skip: set[str] | frozenset[str] = frozenset()
) -> tuple[Deployment, tuple[str, ...]]:
    """Decide ``row`` (locked) with what the mirror has now and store the decision; the row
    and the quests told of it now. ``skip``: quests an earlier deployment was applied to."""
    row = Deployment.objects.select_for_update().select_related("workspace").get(pk=row.pk)
    decision = decision_for(row, skip)
    workspace = row.workspace
    told = tuple(quest for quest in decision.quests if quest not in row.quests)
    for quest, commit, landed in decision.hits:
        submit_event(
            workspace,
            DeploymentObserved(
                id=f"deploy-{row.pk}-{quest}",
                quest=quest,
                at=row.at,
                actor=row.actor,
                commit=commit,
                includes=landed,
                environment=row.environment,
            ),
            source=row.source,
        )
    applied = sorted({*row.quests, *decision.quests})
    row.state = Deployment.State.PENDING if decision.pending else Deployment.State.DECIDED
    row.missing = decision.missing
    row.reason = decision.reason[:1000]
    row.quests = applied
    row.decided_at = None if decision.pending else now
    row.save(update_fields=["state", "missing", "reason", "quests", "decided_at"])
    return row, told


def decision_for(row: Deployment, skip: set[str] | frozenset[str] = frozenset()) -> Decision:
    """What a deployment means now: the watching quests it carries out, or why it waits."""
    if not row.production:
        return Decision(False, f"{row.environment} is not production: recorded, no watch opens")
    quests = list(
        Quest.objects.filter(
            workspace=row.workspace, state__in=[State.WATCHING, State.LANDING]
        ).values_list("quest_id", "state", "data")
    )
    landing = sorted(q for q, state, _ in quests if state == State.LANDING)
    fact = DeploymentFact(row.commit, row.environment, row.actor, row.at, True)
    unknown: list[str] = []

    def contains(deployed: str, landed: str) -> bool | None:
        answer = commit_contains(row.workspace, deployed, landed)
        if answer is None:
            unknown.append(deployed)
        return answer

    found = []
    for quest_id, state, data in sorted(quests, key=lambda q: q[0]):
        if state != State.WATCHING or quest_id in skip:
            continue
        quest = OpenQuest.from_dict(data)
        if quest.deployed_commit is not None:
            continue
        hit = deployed_landing(fact, quest, contains)
        if hit is not None:
            found.append((quest_id, *hit))
    names = [quest for quest, _, _ in found]
    applied = f"applied to {', '.join(names)}" if names else "applies to no watching quest"
    if unknown:
        return Decision(
            True,
            f"pending: the mirror lacks commit {row.commit} ({applied} so far)",
            tuple(found),
            missing=True,
        )
    if landing:
        return Decision(
            True,
            f"pending: {', '.join(landing)} still landing ({applied} so far)",
            tuple(found),
        )
    return Decision(False, applied, tuple(found))


def deployments_sweep(workspace: Workspace, now: datetime | None = None) -> int:
    """Decide the latest pending deployments again (a quest has landed since, or the mirror
    has the commit now); fetch the remote first when one lacked a commit, at most once a
    minute. How many are still pending."""
    pending = list(
        Deployment.objects.filter(workspace=workspace, state=Deployment.State.PENDING)
        .select_related("workspace")
        .order_by("-at", "-pk")[:SWEEP_LIMIT]
    )
    if not pending:
        return 0
    now = now or timezone.now()
    still = 0
    fetched = False
    told: set[str] = set()  # a quest hears of the earliest deployment that carries its fix
    for row in reversed(pending):
        if now - row.recorded_at > GIVE_UP_AFTER:
            _give_up(row, now)
            continue
        with transaction.atomic():
            row, _ = _decide(row, now, told)
        if row.missing and not fetched and _may_fetch(workspace):
            fetched = True
            problem = mirror_fetch(workspace)
            if problem:
                log.warning("%s: %s", workspace.slug, problem)
            with transaction.atomic():
                row, _ = _decide(row, now, told)
        told.update(row.quests)
        still += row.state == Deployment.State.PENDING
    return still


def _give_up(row: Deployment, now: datetime) -> None:
    """A deployment pending for a day waits for something that is not coming (a commit no
    branch of the remote has): decided, so no pass looks at it again."""
    hours = int(GIVE_UP_AFTER.total_seconds() // 3600)
    row.state = Deployment.State.DECIDED
    row.reason = f"given up after {hours} h: {row.reason}"[:1000]
    row.decided_at = now
    row.save(update_fields=["state", "reason", "decided_at"])
    log.warning("deployment of %s to %s: %s", row.commit, row.environment, row.reason)


def _may_fetch(workspace: Workspace) -> bool:
    clock = time.monotonic()
    with _fetched_lock:
        if clock - _fetched.get(workspace.pk, float("-inf")) < FETCH_EVERY_SECONDS:
            return False
        _fetched[workspace.pk] = clock
    return True


def mirror_fetch(workspace: Workspace) -> str | None:
    """Fetch the remote's branches into the mirror (under ``FETCH_NAMESPACE``), so a deployed
    commit pushed since the mirror last looked can be compared; why it could not, or None."""
    if not workspace.remote:
        return None
    try:
        done = git(
            Path(workspace.repository),
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--",
            workspace.remote,
            f"+refs/heads/*:{FETCH_NAMESPACE}*",
            credentials=settings.EPHYRA_GIT_CREDENTIALS_FILE,
            timeout=FETCH_TIMEOUT,
        )
    except NoAnswer as exc:
        return redact(f"could not fetch {workspace.remote}: {exc}")
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or ["no message"]
        return redact(f"could not fetch {workspace.remote}: {last[0]}")
    return None
