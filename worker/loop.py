"""The worker: holds workspace leases and, for each, applies inbound events and delivers effects.

One loop thread does all the work of a process, so a workspace never has two writers inside one
process either; a heartbeat thread renews the leases, so a long effect does not lose them. The
Celery doorbell (``worker.tasks.ring``) only wakes the loop; the loop also polls the database,
so work enqueued while the doorbell rang elsewhere is found within ``EPHYRA_POLL_MS``.

On taking a lease the worker repairs the workspace's projections from the journals, settles what
the previous owner left (``delivery.recover``) and reads the current reviewed policy afresh.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from ephyra.compose import effect_adapters
from ephyra.core.effects import EffectType
from ephyra.core.ports import retry_safe
from intake.deployments.services import deployments_sweep
from intake.otlp.sightings import merges_sweep
from ledger.lease import (
    Fence,
    LeaseLost,
    fence_check,
    lease_acquire,
    lease_release,
    lease_renew,
    worker_identity,
)
from ledger.models import InboundEvent, Lease, Operation
from ledger.operations import claim, claim_batch, supersede
from ledger.selectors import waiting_by_type
from quests.models import Workspace
from quests.repair import repair_workspace
from work.cleanup import remove_ended_worktrees
from work.watch import JUDGE_SECONDS, watches_sweep
from worker import delivery
from worker.delivery import Counts
from worker.inbound import apply_group, inbound_groups
from worker.jobs import JOBS

log = logging.getLogger(__name__)
BATCH = 200
CLAIM_BATCH = 100  # reads claimed together; a crash sends at most this many back to pending
CLEANUP_SECONDS = 60  # how often a worker looks for worktrees of ended quests


class Worker:
    def __init__(self, *, owner: str | None = None, workspaces: list[str] | None = None) -> None:
        self.owner = owner or worker_identity()
        self.only = frozenset(workspaces) if workspaces else None
        self.fences: dict[int, Fence] = {}
        self.counts = Counts()
        self.refused = 0  # fenced writes refused after this worker lost a lease
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        # Operations whose job recorded an outcome, by workspace: the loop feeds their events.
        self._finished: dict[int, list[int]] = {}
        self._cleaned: dict[int, float] = {}  # when ended quests' worktrees were last removed
        self._judged: dict[int, float] = {}  # when deployments and watches were last looked at

    # --- running ---------------------------------------------------------------------------

    def start(self) -> None:
        """Run the loop and the heartbeat in background threads (inside a Celery worker)."""
        for target, name in ((self.run, "ephyra-worker"), (self._beat, "ephyra-heartbeat")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        JOBS.stop_all()  # their commands are killed; their operations are delivered again
        for thread in self._threads:
            thread.join(timeout=10)

    def run(self) -> None:
        """The loop: take leases, do the work, wait for the doorbell or the poll interval."""
        poll = settings.EPHYRA_POLL_MS / 1000
        try:
            while not self.stopping.is_set():
                close_old_connections()
                self.step()
                self.wake.wait(poll)
                self.wake.clear()
        finally:
            self.release()
            connection.close()

    def run_forever(self) -> None:
        """Run in the foreground (``manage.py worker --standalone``) with a heartbeat thread."""
        beat = threading.Thread(target=self._beat, name="ephyra-heartbeat", daemon=True)
        beat.start()
        self._threads.append(beat)
        try:
            self.run()
        finally:
            self.stopping.set()
            beat.join(timeout=10)

    def _beat(self) -> None:
        interval = settings.EPHYRA_LEASE_MS / 3000
        try:
            while not self.stopping.wait(interval):
                self.renew()
        finally:
            connection.close()

    # --- leases ----------------------------------------------------------------------------

    def renew(self) -> None:
        with self._lock:
            held = list(self.fences.items())
        for workspace_id, fence in held:
            if not lease_renew(fence):
                self._lost(workspace_id, "its lease expired or was taken over")

    def _lost(self, workspace_id: int, why: str) -> None:
        with self._lock:
            if self.fences.pop(workspace_id, None) is not None:
                log.warning("%s stops serving workspace %s: %s", self.owner, workspace_id, why)

    def acquire(self) -> None:
        workspaces = Workspace.objects.order_by("pk")
        if self.only is not None:
            workspaces = workspaces.filter(slug__in=self.only)
        for workspace in workspaces:
            if workspace.pk in self.fences:
                continue
            fence = lease_acquire(workspace.pk, self.owner)
            if fence is None:
                continue
            with self._lock:
                self.fences[workspace.pk] = fence
            log.info("%s serves %s (generation %s)", self.owner, workspace.slug, fence.generation)
            try:
                self.started(fence, workspace)
            except LeaseLost:
                self._refused(workspace.pk)

    def started(self, fence: Fence, workspace: Workspace) -> None:
        """Say which effect types this worker serves, repair from the journals, then settle
        what the previous owner left."""
        served = sorted(str(t) for t in effect_adapters())
        with transaction.atomic():
            fence_check(fence)
            Lease.objects.filter(pk=workspace.pk).update(effect_types=served)
            report = repair_workspace(workspace)
        unserved = waiting_by_type([workspace.slug])[workspace.slug]
        unserved = {t: n for t, n in unserved.items() if t not in served}
        if unserved:
            log.warning(
                "%s: no adapter for %s; their operations wait (%s)",
                workspace.slug,
                ", ".join(sorted(unserved)),
                ", ".join(f"{t}={n}" for t, n in sorted(unserved.items())),
            )
        if report.changed:
            log.info("repair of %s: %s", workspace.slug, report.summary())
        self.counts.add(delivery.recover(fence, workspace))

    def release(self) -> None:
        with self._lock:
            held, self.fences = list(self.fences.values()), {}
        for fence in held:
            lease_release(fence)

    def _refused(self, workspace_id: int) -> None:
        self.refused += 1
        self._lost(workspace_id, "a fenced write was refused")

    # --- work ------------------------------------------------------------------------------

    def step(self) -> None:
        self.acquire()
        with self._lock:
            held = list(self.fences.items())
        for workspace_id, fence in held:
            try:
                self.drain(fence)
                self.sweep(fence)
            except LeaseLost:
                self._refused(workspace_id)

    def sweep(self, fence: Fence) -> None:
        """Carry the repeated signals held past their merge window (``intake.otlp.sightings``): a
        timer does it through Celery; this catches what no timer did (no broker, a lost one).
        Decide pending deployments and judge open watches (``work.watch``), every few seconds."""
        workspace = Workspace.objects.get(pk=fence.workspace_id)
        if merges_sweep(workspace, timezone.now()):
            self.wake.set()  # the carrying events are queued: apply them on the next pass
        now = time.monotonic()
        if now - self._judged.get(workspace.pk, float("-inf")) >= JUDGE_SECONDS:
            # Deployments first: one decided now may move a window the watches then judge.
            self._judged[workspace.pk] = now
            deployments_sweep(workspace)
            if watches_sweep(workspace):
                self.wake.set()  # a verdict is queued: apply it on the next pass
        if now - self._cleaned.get(workspace.pk, float("-inf")) >= CLEANUP_SECONDS:
            self._cleaned[workspace.pk] = now
            gone = remove_ended_worktrees(Path(settings.DATA_DIR), workspace)
            if gone:
                log.info("%s: removed the worktrees of ended quests %s", workspace.slug, gone)

    def drain(self, fence: Fence) -> None:
        """Work the workspace's queue until it is empty (or the lease is gone)."""
        types = [str(t) for t in effect_adapters()]
        while not self.stopping.is_set() and self.fences.get(fence.workspace_id) == fence:
            # Read afresh: a new reviewed policy takes effect from the next event.
            workspace = Workspace.objects.select_related("policy").get(pk=fence.workspace_id)
            did = self.feed_finished(fence, workspace)
            did += self.take_inbound(fence, workspace)
            due = Operation.objects.filter(
                workspace=workspace,
                state=Operation.State.PENDING,
                type__in=types,
                due_at__lte=timezone.now(),
            ).order_by("id")[:BATCH]
            due = list(due)
            did += len(due)
            self.deliver(fence, workspace, due)
            if not did:
                return

    def take_inbound(self, fence: Fence, workspace: Workspace) -> int:
        """Apply the oldest pending inbound events (up to ``BATCH``) in groups of distinct
        quests, one transaction a group (``worker.inbound``); how many were taken."""
        rows = list(
            InboundEvent.objects.filter(
                workspace=workspace, state=InboundEvent.State.PENDING
            ).order_by("id")[:BATCH]
        )
        for group in inbound_groups(rows):
            apply_group(fence, workspace, group)
        self.counts.inbound += len(rows)
        return len(rows)

    def deliver(self, fence: Fence, workspace: Workspace, due: list[Operation]) -> None:
        """Deliver in ledger order: runs of reads and computations together (one claim and one
        outcome transaction a run), every write alone. A run holds one operation per quest, and
        a quest whose events were fed back is read again: whether its next operation is still
        current is judged after the earlier one's outcome moved it, as one at a time would."""
        heads = delivery.heads(workspace, due)
        run: dict[str, Operation] = {}  # quest id -> its operation in the run, in ledger order
        moved: set[str] = set()

        def flush() -> None:
            ops = list(run.values())
            for start in range(0, len(ops), CLAIM_BATCH):
                claimed = claim_batch(fence, ops[start : start + CLAIM_BATCH])
                self.counts.add(delivery.deliver_batch(fence, workspace, claimed))
            moved.update(run)
            run.clear()

        for op in due:
            if op.quest_id in run:
                flush()
            if op.quest_id in moved:
                current, why = delivery.is_current(workspace, op)
            else:
                current, why = delivery.is_current(workspace, op, heads.get(op.quest_id))
            if not current:
                supersede(fence, op, why)
                self.counts.superseded += 1
            elif delivery.runs_long(op):
                flush()
                if claim(fence, op):
                    self.start_job(fence, workspace, op)
                moved.add(op.quest_id)
            elif retry_safe(EffectType(op.type)):
                run[op.quest_id] = op
            else:
                flush()
                if claim(fence, op):
                    self.counts.add(delivery.deliver(fence, workspace, op))
                moved.add(op.quest_id)
        flush()

    # --- jobs ------------------------------------------------------------------------------

    def start_job(self, fence: Fence, workspace: Workspace, op: Operation) -> None:
        """Run a claimed long operation in a job thread (``worker.jobs``); its outcome is
        recorded there and its events fed back here, on a later pass."""
        adapter = effect_adapters()[EffectType(op.type)]

        def held() -> bool:
            return not self.stopping.is_set() and self.fences.get(fence.workspace_id) == fence

        def done(outcome) -> None:
            try:
                counts = delivery.job_done(fence, op, outcome)
            except LeaseLost:
                return  # the next holder finds the operation orphaned and delivers it again
            with self._lock:
                self.counts.add(counts)
                self._finished.setdefault(fence.workspace_id, []).append(op.pk)
            self.wake.set()

        JOBS.start(
            delivery.job_request(fence, workspace, op),
            adapter.run,
            done,
            threads=settings.EPHYRA_JOBS,
            still_held=held,
        )

    def feed_finished(self, fence: Fence, workspace: Workspace) -> int:
        """Feed back the events of the operations whose jobs finished; how many."""
        with self._lock:
            pks = self._finished.pop(workspace.pk, [])
        for op in Operation.objects.filter(pk__in=pks).order_by("id"):
            events = delivery.feed_back(fence, workspace, op)
            with self._lock:
                self.counts.events += events
        return len(pks)
