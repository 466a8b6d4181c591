"""How log lines read: redacted text by default, one JSON object per line for
``EPHYRA_LOG_FORMAT=json`` (docs/observability.md).

A line holds the time, level, logger and message, and the fields the caller passed as
``extra`` (the engine's transitions: quest, event, from, to, journal head; the ledger's effect
outcomes: key, type, state, duration). Every text goes through ``ephyra.redaction`` first, and
a field whose name says it holds a secret (``password``, ``token``…) is withheld whole: a log
line is read by more people than the database.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from ephyra.redaction.redact import is_secret_key, redact

# The attributes every LogRecord has: anything else on a record came from ``extra``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
WITHHELD = "[withheld]"


def _clean(value: Any, depth: int = 0) -> Any:
    """The value with its texts redacted, its secret-named keys withheld, made JSON-able."""
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth > 4:  # a log field is small; a deep structure is cut rather than walked
        return "…"
    if isinstance(value, dict):
        return {
            str(k): WITHHELD if is_secret_key(str(k)) else _clean(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [_clean(item, depth + 1) for item in value]
    return redact(str(value))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for name, value in vars(record).items():
            if name in _STANDARD or name.startswith("_") or name in line:
                continue
            line[name] = WITHHELD if is_secret_key(name) else _clean(value)
        if record.exc_info:
            line["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False, default=str)


class RedactingFormatter(logging.Formatter):
    """The plain text line (and its traceback), redacted: the default format."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
