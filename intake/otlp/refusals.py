"""Counting the OTLP exports the receiver refuses, by reason, per minute (``RefusedExports``).

One upsert per refusal, outside any transaction of the export's own. A refusal that cannot be
counted (the database is the reason: 503) is only logged: the count is for an operator, the
answer to the sender matters more.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from django.db import DatabaseError, connection

from intake.otlp.models import RefusedExports

logger = logging.getLogger("ephyra.intake.otlp")

# The status codes of the receiver (views.py) by the name the metrics give them.
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


def refusal_count(status: int, at: datetime) -> None:
    reason = REASONS.get(status, f"http_{status}")
    minute = at.astimezone(UTC).replace(second=0, microsecond=0)
    table = connection.ops.quote_name(RefusedExports._meta.db_table)
    prepared = RefusedExports._meta.get_field("minute").get_db_prep_save(minute, connection)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (minute, reason, exports) VALUES (%s, %s, 1) "
                f"ON CONFLICT (minute, reason) DO UPDATE SET exports = {table}.exports + 1",
                [prepared, reason],
            )
    except DatabaseError:
        logger.warning("a refused OTLP export (%s) could not be counted", reason, exc_info=True)
