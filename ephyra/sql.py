"""Raw statements for the engine's and repair's writes, a way to send several at once, and
many rows inserted at once (``insert_rows``: repair, and intake's signals and queued events).

The engine's transaction is a handful of small statements (the workspace lock, the projection,
the ledger rows, the signal, the audit entry) whose results it needs only at the end. On
PostgreSQL each statement sent alone costs a round trip, and the round trips, not the work, are
most of the time; the ORM's compiling costs as much again. psycopg's client-side-binding cursor
(Django's default) sends several statements joined by ``;`` as one query and hands back each
one's result in turn, so ``run_together`` sends them as one. SQLite is in-process: there the
statements simply run one after the other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

from django.db import IntegrityError, connection, models, transaction
from django.db.models.constants import OnConflict

try:
    from psycopg import ClientCursor
except ImportError:  # psycopg is only needed for PostgreSQL
    ClientCursor = None


class Statement(NamedTuple):
    sql: str
    params: list[Any]


class Result(NamedTuple):
    rowcount: int
    rows: list[tuple] | None  # what a statement that returns rows returned


def run_together(statements: list[Statement]) -> list[Result]:
    """Run ``statements`` in order in the current transaction; each one's result. A failing
    statement raises, and the ones after it do not run."""
    with connection.cursor() as cursor:
        raw = cursor.cursor
        if len(statements) > 1 and ClientCursor is not None and isinstance(raw, ClientCursor):
            # Each statement is bound on its own: psycopg caches how it parses a statement's
            # placeholders only for short texts, and the joined text is long.
            cursor.execute(";\n".join(raw.mogrify(s.sql, s.params) for s in statements))
            results = [_result(raw)]
            while raw.nextset():
                results.append(_result(raw))
            return results
        results = []
        for statement in statements:
            cursor.execute(statement.sql, statement.params)
            results.append(_result(cursor))
        return results


def _result(cursor: Any) -> Result:
    if cursor.description is None:
        return Result(cursor.rowcount, None)
    # SQLite counts the rows of an INSERT ... RETURNING only once they are fetched.
    rows = cursor.fetchall()
    return Result(len(rows), rows)


def prepared(model: Any, workspace: Any, rows: list[dict]) -> tuple[list, list[list]]:
    """The model's non-key fields and, per row (values by field name), the values to insert,
    prepared for the database; fields a row leaves out get their default, as ``bulk_create``
    would fill them, each default prepared once for all the rows."""
    names = set(rows[0])
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    template = model(workspace=workspace)
    constant = {
        f.name: f.get_db_prep_save(f.pre_save(template, True), connection)
        for f in fields
        if f.name not in names
    }
    values = [
        [
            constant[f.name] if f.name in constant else f.get_db_prep_save(row[f.name], connection)
            for f in fields
        ]
        for row in rows
    ]
    return fields, values


def insert_sql(model: Any, fields: list, rows: int, *, ignore_conflicts: bool) -> str:
    """``INSERT`` of ``rows`` rows of ``fields``; with ``ignore_conflicts`` a row whose unique
    key exists is left out (``ON CONFLICT DO NOTHING``, SQLite's ``INSERT OR IGNORE``)."""
    qn = connection.ops.quote_name
    on_conflict = OnConflict.IGNORE if ignore_conflicts else None
    head = connection.ops.insert_statement(on_conflict=on_conflict)
    tail = connection.ops.on_conflict_suffix_sql(fields, on_conflict, None, None)
    columns = ", ".join(qn(f.column) for f in fields)
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    values = ", ".join([one] * rows)
    return f"{head} {qn(model._meta.db_table)} ({columns}) VALUES {values} {tail}".rstrip()


def insert_where_sql(model: Any, fields: list, condition: str, *, ignore_conflicts: bool) -> str:
    """``INSERT`` of one row of ``fields`` that happens only if ``condition`` (SQL) holds when
    the statement runs: ``INSERT ... SELECT <values> WHERE <condition>``."""
    qn = connection.ops.quote_name
    on_conflict = OnConflict.IGNORE if ignore_conflicts else None
    head = connection.ops.insert_statement(on_conflict=on_conflict)
    tail = connection.ops.on_conflict_suffix_sql(fields, on_conflict, None, None)
    columns = ", ".join(qn(f.column) for f in fields)
    values = ", ".join(["%s"] * len(fields))
    return (
        f"{head} {qn(model._meta.db_table)} ({columns}) SELECT {values} WHERE {condition} {tail}"
    ).rstrip()


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
_COPY_SPECIAL = re.compile(r"[\\\n\r\t]")


def copy_rows(model: Any, workspace: Any, rows: list[dict]) -> None:
    """Insert ``rows`` (values by field name; other fields at their defaults, as
    ``prepared``) with PostgreSQL's COPY, in its text format written here: one string for the
    whole batch, each value turned into text by a function picked once per field, instead of
    prepared by its field and then dumped by psycopg, which costs more than the COPY itself."""
    names = set(rows[0])
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    template = model(workspace=workspace)
    parts, variable = [], []
    for f in fields:
        text = _copy_text(f)
        if f.name in names:
            parts.append("%s")
            variable.append((f.name, text))
        else:  # a default: the same text in every row
            parts.append(text(f.pre_save(template, True)).replace("%", "%%"))
    line = "\t".join(parts) + "\n"
    data = "".join([line % tuple([text(row[name]) for name, text in variable]) for row in rows])
    qn = connection.ops.quote_name
    sql = f"COPY {qn(model._meta.db_table)} ({', '.join(qn(f.column) for f in fields)}) FROM STDIN"
    # psycopg's own cursor: Django has no COPY; its errors still come out as Django's.
    with (
        connection.cursor() as cursor,
        connection.wrap_database_errors,
        cursor.cursor.copy(sql) as copy,
    ):
        copy.write(data)


def _copy_text(field: Any) -> Callable[[Any], str]:
    """How a value of ``field`` is written in COPY's text format (None is SQL NULL, as Django
    stores a JSON field's None too)."""
    if isinstance(field, models.JSONField):
        encoder = field.encoder
        # JSON text never holds a raw newline or tab; only its backslashes need escaping.
        return lambda v: "\\N" if v is None else json.dumps(v, cls=encoder).replace("\\", "\\\\")
    if isinstance(field, models.DateTimeField):
        return _copy_datetime
    if isinstance(field, models.BooleanField):
        return lambda v: "\\N" if v is None else ("t" if v else "f")
    if isinstance(field, models.IntegerField | models.ForeignKey):
        return lambda v: "\\N" if v is None else str(int(v))
    return _copy_str


def _copy_str(value: Any) -> str:
    if value is None:
        return "\\N"
    text = str.__str__(value)  # a choices enum's own text, as psycopg would send it
    return text.translate(_COPY_ESCAPES) if _COPY_SPECIAL.search(text) else text


def _copy_datetime(value: datetime | None) -> str:
    if value is None:
        return "\\N"
    if value.tzinfo is None:
        raise ValueError(f"a naive datetime for COPY: {value!r}")
    return value.isoformat()


# -- inserting many rows --------------------------------------------------------------------

BATCH = 500  # rows per INSERT where COPY is not used
COPY_FROM = 20  # rows from which PostgreSQL's COPY is used: 3-4x faster than bulk_create


def insert_rows(
    model: Any, workspace: Any, rows: list[dict], *, ignore_conflicts: bool = False
) -> None:
    """Insert ``rows`` (values by field name) with every other field at its default, the way
    ``bulk_create`` would fill it, but each default prepared once per batch, not per row, and
    no keys returned.

    On PostgreSQL a batch goes in by COPY (``bulk_create`` sends each column as an array, and
    psycopg escapes every text element of it with a regular expression: most of the time of
    storing an export of a thousand signals went there). With ``ignore_conflicts`` a conflict
    (a key that exists) rolls the COPY back to a savepoint and the batch goes in as INSERT ...
    ON CONFLICT DO NOTHING, which leaves the existing rows as they are. (On SQLite that is
    INSERT OR IGNORE, which would also drop a row breaking NOT NULL: callers pass rows whose
    required values are set.)"""
    if not rows:
        return
    if connection.vendor == "postgresql" and len(rows) >= COPY_FROM:
        if not ignore_conflicts:
            copy_rows(model, workspace, rows)
            return
        try:
            with transaction.atomic():
                copy_rows(model, workspace, rows)
            return
        except IntegrityError:
            pass
    fields, values = prepared(model, workspace, rows)
    size = max(1, min(BATCH, connection.ops.bulk_batch_size(fields, values)))
    with connection.cursor() as cursor:
        for start in range(0, len(values), size):
            chunk = values[start : start + size]
            sql = insert_sql(model, fields, len(chunk), ignore_conflicts=ignore_conflicts)
            cursor.execute(sql, [value for row in chunk for value in row])


def insert_objects(objects: list[Any], *, ignore_conflicts: bool = False) -> None:
    """``insert_rows`` for model instances of one workspace (each field's value as
    ``bulk_create`` would take it, ``pre_save``): ``bulk_create`` without the keys back, several
    times faster on PostgreSQL."""
    if not objects:
        return
    model = type(objects[0])
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    rows = [{f.name: f.pre_save(o, True) for f in fields} for o in objects]
    insert_rows(model, objects[0].workspace, rows, ignore_conflicts=ignore_conflicts)
