"""The Celery application with one task that does nothing, for ``benchmarks/effects.py``:
``celery -A benchmarks.noop_tasks worker`` consumes plain no-op tasks, the baseline the ledger
is compared against. Kept here, not in the product: nothing of Ephyra sends it."""

from ephyra.celery import app


@app.task(name="bench.noop", ignore_result=True)
def noop() -> None:
    """Nothing: the cost measured is Celery's own."""


__all__ = ["app", "noop"]
