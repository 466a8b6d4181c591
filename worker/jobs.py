"""Long effects as jobs: an agent step that runs a test suite or a bisect for minutes must not
hold up the worker's loop, which meanwhile applies people's actions and delivers short effects.

An adapter that says ``runs_long = True`` is claimed by the loop like any operation, then run in
one of the worker's job threads (``EPHYRA_JOBS``, default 2). The job records the outcome under
the worker's fence, as the loop would; the loop feeds its events back to the engine on its next
pass, so the loop stays the one writer of quests in the process. Jobs run in the process that
holds the workspace's lease, because the quest's worktree and the mirror are on its disk.

A job is stopped by ``stop_agent`` (the quest was killed, paused or revised: the machine asks),
by the worker losing the lease, or by the worker stopping; the adapter sees it through
``EffectRequest.cancelled`` and its runner kills the command's process group. A job cut short
by a crash leaves its operation started: the next holder of the lease finds it orphaned and
delivers it again (an agent step is a computation; its writes are idempotent by revision).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.db import close_old_connections, connection

from ephyra.core.ports import EffectRequest, EffectResult

log = logging.getLogger(__name__)


class Job:
    def __init__(self, key: str) -> None:
        self.key = key
        self.stop = threading.Event()


class Jobs:
    """The running jobs of this process, by (workspace slug, quest id)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], Job] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._size = 0

    def start(
        self,
        request: EffectRequest,
        run: Callable[[EffectRequest], EffectResult],
        done: Callable[[EffectResult | BaseException], None],
        *,
        threads: int,
        still_held: Callable[[], bool],
    ) -> None:
        """Run ``run(request)`` in a job thread; ``done`` gets its result or its exception,
        in that thread."""
        job = Job(request.key)
        where = (request.workspace, request.quest_id)
        with self._lock:
            if self._pool is None or self._size != threads:
                self._pool = ThreadPoolExecutor(threads, thread_name_prefix="ephyra-job")
                self._size = threads
            earlier = self._running.get(where)
            if earlier is not None:
                earlier.stop.set()  # a newer step of the quest supersedes a running one
            self._running[where] = job
            pool = self._pool
        cancelled = lambda: job.stop.is_set() or not still_held()  # noqa: E731
        pool.submit(self._run, where, job, request._replace(cancelled=cancelled), run, done)

    def _run(self, where, job: Job, request: EffectRequest, run, done) -> None:
        try:
            close_old_connections()
            try:
                outcome: EffectResult | BaseException = run(request)
            except BaseException as exc:  # handed to ``done``, which decides what it means
                outcome = exc
            done(outcome)
        except Exception:
            log.exception("job %s could not record its outcome", job.key)
        finally:
            with self._lock:
                if self._running.get(where) is job:
                    del self._running[where]
            connection.close()

    def stop(self, workspace: str, quest_id: str) -> bool:
        """Ask the quest's running job to stop; False when none runs here."""
        with self._lock:
            job = self._running.get((workspace, quest_id))
        if job is None:
            return False
        job.stop.set()
        return True

    def stop_all(self) -> None:
        with self._lock:
            running = list(self._running.values())
        for job in running:
            job.stop.set()

    def running(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._running)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the jobs started so far to end (for a stopping worker and for tests)."""
        with self._lock:
            pool, self._pool, self._size = self._pool, None, 0
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=False)


# One registry per process: the worker starts jobs in it, ``stop_agent`` stops them.
JOBS = Jobs()


class StopAgentAdapter:
    """``stop_agent``: stop the quest's running agent step, if one runs in this process. The
    step's own operation then ends as stopped; nothing else is to undo, since a step's writes
    (a worktree, a branch) belong to the revision it ran for."""

    def run(self, request: EffectRequest) -> EffectResult:
        stopped = JOBS.stop(request.workspace, request.quest_id)
        detail = {"stopped": stopped, "state": request.payload.get("state")}
        return EffectResult("succeeded", detail)

    def check(self, request: EffectRequest) -> EffectResult | None:
        return None
