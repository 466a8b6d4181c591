"""Named crash points for the fault-injection harness (tests/ledger, benchmarks/faults.py).

A worker process started with ``EPHYRA_FAULTS="<seed>:<one-in-N>[:<point>,…]"`` kills itself
with SIGKILL at a named point, chosen by a seeded random stream, so a failing run can be
replayed by its seed. Without the variable every call is one dictionary lookup and nothing else.
"""

from __future__ import annotations

import os
import random
import signal
import sys

POINTS = (
    "after_claim",  # the operation is started; the adapter was not called
    "after_call",  # the adapter did the effect; its outcome is not recorded
    "after_outcome",  # the outcome is recorded; its events are not fed back
    "after_journal",  # the engine's journal commit landed; the database transaction did not
)

_spec = os.environ.get("EPHYRA_FAULTS", "")
_random: random.Random | None = None
_one_in = 0
_points: frozenset[str] = frozenset(POINTS)
if _spec:
    seed, one_in, *chosen = _spec.split(":")
    _random, _one_in = random.Random(int(seed)), int(one_in)
    if chosen and chosen[0]:
        _points = frozenset(chosen[0].split(","))


def reach(point: str) -> None:
    if _random is None or point not in _points:
        return
    if _random.randrange(_one_in) == 0:
        # Tell the harness where we died; stderr is unbuffered and the harness reads it.
        sys.stderr.write(f"EPHYRA-FAULT {point}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
