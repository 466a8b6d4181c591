"""Named crash points for the fault-injection harness (tests/ledger, benchmarks/faults.py).

A worker process started with the setting ``EPHYRA_FAULTS="<seed>:<one-in-N>[:<point>,…]"``
kills itself with SIGKILL at a named point, chosen by a seeded random stream, so a failing run
can be replayed by its seed. With the setting empty (production) every call returns at once.
"""

from __future__ import annotations

import os
import random
import signal
import sys

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

POINTS = (
    "after_claim",  # the operation is started; the adapter was not called
    "after_call",  # the adapter did the effect; its outcome is not recorded
    "after_outcome",  # the outcome is recorded; its events are not fed back
    "after_journal",  # the engine's journal commit landed; the database transaction did not
)


class _Plan:
    def __init__(self, spec: str) -> None:
        try:
            seed, one_in, *chosen = spec.split(":")
            self.random, self.one_in = random.Random(int(seed)), int(one_in)
        except ValueError:
            raise ImproperlyConfigured(
                f"EPHYRA_FAULTS must be <seed>:<one-in-N>[:<point>,...], got {spec!r}"
            ) from None
        self.points = frozenset(chosen[0].split(",")) if chosen and chosen[0] else set(POINTS)
        unknown = self.points - set(POINTS)
        if unknown or self.one_in < 1:
            raise ImproperlyConfigured(
                f"EPHYRA_FAULTS names unknown points {sorted(unknown)} or N < 1; points: {POINTS}"
            )


_plan: _Plan | None = None
_read = False


def reach(point: str, what: str = "") -> None:
    """Maybe die here. ``what`` (the effect type and key being delivered) goes into the line
    the harness reads, so it can tell which effect a kill interrupted."""
    global _plan, _read
    if not _read:  # read once per process, on the first point reached
        _plan, _read = (_Plan(settings.EPHYRA_FAULTS) if settings.EPHYRA_FAULTS else None), True
    if _plan is None or point not in _plan.points:
        return
    if _plan.random.randrange(_plan.one_in) == 0:
        # Tell the harness where we died; stderr is unbuffered and the harness reads it.
        sys.stderr.write(f"EPHYRA-FAULT {point} {what}".rstrip() + "\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
