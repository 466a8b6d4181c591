"""Canonical JSON and its SHA-256 digest: the form anyone can recompute.

Canonical form: ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
encoded as UTF-8. Floats are refused because their text form differs between languages; use
integers (for example micro-units) or strings instead.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def _check(value: Any, path: str) -> None:
    if isinstance(value, float):
        raise ValueError(f"canonical JSON refuses floats (at {path or 'the top'})")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"canonical JSON needs string keys (at {path or 'the top'})")
            _check(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]")


def canonical_json(value: Any) -> bytes:
    _check(value, "")
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def canonical_digest(value: Any) -> str:
    """``sha256:<hex>`` over the canonical JSON of ``value``."""
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()
