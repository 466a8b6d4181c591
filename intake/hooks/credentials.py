"""Hook secrets are stored outside the database: a hook row names where its secret is read.

A reference is ``env:NAME`` (an environment variable of the web process) or ``file:/path`` (a
file, as container platforms mount secrets). The secret is read on every delivery, so rotating
it needs no restart, and it is never written anywhere Ephyra keeps data.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_ENV = re.compile(r"^env:([A-Za-z_][A-Za-z0-9_]{0,199})$")
_FILE = re.compile(r"^file:(/.{1,990})$")


class SecretUnavailable(Exception):
    """The reference is well formed but names nothing readable (the message holds no secret)."""


def validate_reference(reference: str) -> str:
    if _ENV.match(reference) or _FILE.match(reference):
        return reference
    raise ValueError(
        f"a secret reference is env:NAME or file:/absolute/path, got {reference[:60]!r}"
    )


def env_reference(name: str) -> str:
    return validate_reference(f"env:{name}")


def file_reference(path: str) -> str:
    return validate_reference(f"file:{path}")


def read_secret(reference: str) -> str:
    """The secret a reference names; surrounding whitespace (a file's newline) is dropped."""
    if match := _ENV.match(reference):
        value = os.environ.get(match.group(1), "").strip()
        if not value:
            raise SecretUnavailable(f"the environment variable {match.group(1)} is not set")
        return value
    if match := _FILE.match(reference):
        try:
            value = Path(match.group(1)).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SecretUnavailable(
                f"cannot read {match.group(1)}: {exc.__class__.__name__}"
            ) from None
        if not value:
            raise SecretUnavailable(f"{match.group(1)} is empty")
        return value
    raise SecretUnavailable("the hook's secret reference is malformed")
