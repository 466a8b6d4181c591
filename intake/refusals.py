"""Counting what the receivers refuse, by reason, per minute: OTLP exports (``RefusedExports``)
and forge webhook deliveries (``RefusedDeliveries``), which ``/metrics`` reports.

One upsert per refusal, outside any transaction of the request's own. A refusal that cannot be
counted (the database is the reason: 503) is only logged: the count is for an operator, the
answer to the sender matters more.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from django.db import DatabaseError, connection, models

logger = logging.getLogger("ephyra.intake")

# The status codes of the receivers by the name the metrics give them.
REASONS = {
    400: "bad_request",
    401: "unauthenticated",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
    429: "throttled",
    500: "internal_error",
    503: "unavailable",
}


def reason_of(status: int) -> str:
    return REASONS.get(status, f"http_{status}")


def refusal_count(model: type[models.Model], counter: str, at: datetime, **keys: str) -> None:
    """Add one to ``counter`` of the row of ``model`` for the minute of ``at`` and ``keys``
    (the fields of the model's unique constraint besides ``minute``)."""
    fields = {"minute": at.astimezone(UTC).replace(second=0, microsecond=0), **keys}
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    columns = ", ".join(quote(name) for name in fields)
    values = [model._meta.get_field(n).get_db_prep_save(v, connection) for n, v in fields.items()]
    count = quote(counter)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({columns}, {count}) "
                f"VALUES ({', '.join(['%s'] * len(values))}, 1) "
                f"ON CONFLICT ({columns}) DO UPDATE SET {count} = {table}.{count} + 1",
                values,
            )
    except DatabaseError:
        logger.warning("a refusal (%s) could not be counted", keys, exc_info=True)
