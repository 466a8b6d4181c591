"""Counts that stop at a bound, and a paginator built on them.

A list of a hundred thousand rows is not worth counting exactly to show "1,000+": GitHub and
Sentry stop too. Each count reads at most ``bound + 1`` rows, so a page costs the same however
big the table grows (benchmarks/inbox.py measures it).
"""

from __future__ import annotations

from django.core.exceptions import EmptyResultSet
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.functional import cached_property

COUNT_CAP = 1_000


class Tally(int):
    """A count that stops at a bound: exact up to it; past it, the bound itself with ``more``
    set. ``label`` is what a page shows: "37", "1,000+"."""

    more: bool

    def __new__(cls, value: int, more: bool = False) -> Tally:
        tally = super().__new__(cls, value)
        tally.more = more
        return tally

    @property
    def label(self) -> str:
        return f"{int(self):,}+" if self.more else f"{int(self):,}"

    def __repr__(self) -> str:
        return f"Tally({int(self)}{', more=True' if self.more else ''})"


def capped_counts(queries: dict[str, QuerySet], bound: int = COUNT_CAP) -> dict[str, Tally]:
    """How many rows each query matches, up to ``bound``, all in one statement: each counts
    the rows of ``<query> LIMIT bound + 1``, so the database stops reading at the bound
    whatever the size of the table."""
    parts: list[str] = []
    params: list = []
    using = next(iter(queries.values())).db
    for n, rows in enumerate(queries.values()):
        limited = rows.order_by().values("pk")[: bound + 1]
        using = limited.db
        try:
            sql, values = limited.query.get_compiler(using=using).as_sql()
        except EmptyResultSet:  # a condition no row can meet, such as ``slug IN ()``
            parts.append("0")
            continue
        parts.append(f"(SELECT COUNT(*) FROM ({sql}) AS capped_{n})")
        params.extend(values)
    if all(part == "0" for part in parts):  # nothing can match: no need to ask
        counted = [0] * len(parts)
    else:
        with connections[using].cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(parts), params)
            counted = cursor.fetchone()
    return {
        name: Tally(bound, more=True) if n > bound else Tally(n)
        for name, n in zip(queries, counted, strict=True)
    }


class CappedPaginator(Paginator):
    """A ``Paginator`` whose count stops at ``bound`` rows (``tally``). Past the bound it
    counts one row more than the bound, so the pages up to the bound are whole and the last
    of them offers a next one."""

    def __init__(self, object_list: QuerySet, per_page: int, bound: int) -> None:
        super().__init__(object_list, per_page)
        self.bound = bound

    @cached_property
    def tally(self) -> Tally:
        return capped_counts({"rows": self.object_list}, self.bound)["rows"]

    @cached_property
    def count(self) -> int:
        return self.tally + 1 if self.tally.more else int(self.tally)


# Past this many pages the count is exact and ``get_page`` lands on the last page, as Django's
# Paginator does; the bound stays an integer every database takes as a LIMIT.
_FURTHEST_PAGE = 1_000_000


def page_number(page) -> int:
    """A page number as ``Paginator.get_page`` reads it, kept to a bound every database takes
    in a LIMIT."""
    try:
        return min(max(1, int(page)), _FURTHEST_PAGE)
    except (TypeError, ValueError):
        return 1
