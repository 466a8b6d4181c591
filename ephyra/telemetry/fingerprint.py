"""Fingerprints: which signals are the same error. Versioned, so the rule can change openly.

Version 1 (``docs/telemetry.md`` walks through it so anyone can recompute one):

1. The inputs are already redacted (``redact`` runs before anything here).
2. The frames used are the in-app ones; when a trace has frames but none in app, all of them.
   Consecutive repeats (recursion) collapse to one, and at most ``MAX_FRAMES`` are used,
   innermost first. Each frame contributes ``frame:<key>|<function>`` where the key is the
   module (Java class, Go package, Python library module) or else the normalised path. Line
   numbers are not part of it: an edit above the failing line does not make a new error.
3. The message contributes only when there are no frames at all, after ``parameterise``.
4. ``sha256("\\n".join(["type:<exception type>", *frame lines or "message:<text>"]))``, as
   ``v1:<64 hex digits>``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from ephyra.telemetry.stack import Frame, normalise_path

FINGERPRINT_VERSION = 1
MAX_FRAMES = 30
MAX_MESSAGE = 1000

_PLACEHOLDER = re.compile(r"\[redacted:([a-z0-9-]+)\]")
_PLACEHOLDER_CLASS = {"credit-card": "<num>", "ipv4": "<ip>", "ipv6": "<ip>", "email": "<email>"}
_PARAMETERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?"
            r"(?:Z|[+-]\d{2}:?\d{2})?)?\b"
        ),
        "<ts>",
    ),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<ts>"),
    (re.compile(r"\b[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\b"), "<uuid>"),
    (
        re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}\b"),
        "<email>",
    ),
    (re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])"), "<ip>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,}\b"), "<hash>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<num>"),
)
_SPACE = re.compile(r"\s+")


def parameterise(message: str) -> str:
    """The message with its variable parts replaced by their kind: ``<num>``, ``<uuid>``,
    ``<hash>``, ``<hex>``, ``<ip>``, ``<ts>``, ``<email>``, ``<redacted>``."""
    text = _PLACEHOLDER.sub(lambda m: _PLACEHOLDER_CLASS.get(m[1], "<redacted>"), message)
    for pattern, kind in _PARAMETERS:
        text = pattern.sub(kind, text)
    return _SPACE.sub(" ", text).strip()[:MAX_MESSAGE]


def frame_key(frame: Frame, roots: tuple[str, ...] = ()) -> str:
    return frame.module or normalise_path(frame.file, roots)


def fingerprint_lines(
    exception_type: str, frames: Sequence[Frame], message: str, roots: tuple[str, ...] = ()
) -> list[str]:
    """The exact text that is hashed, one item per line (shown in the docs and the tests)."""
    lines = [f"type:{exception_type.strip()}"]
    chosen = [f for f in frames if f.in_app] or frames
    if not chosen:
        lines.append(f"message:{parameterise(message)}")
        return lines
    previous = ""
    for frame in chosen:
        line = f"frame:{frame_key(frame, roots)}|{frame.function}"
        if line != previous:  # recursion: the same call many times is one
            lines.append(line)
            previous = line
            if len(lines) > MAX_FRAMES:
                break
    return lines


def fingerprint(
    exception_type: str, frames: Sequence[Frame], message: str, roots: tuple[str, ...] = ()
) -> str:
    text = "\n".join(fingerprint_lines(exception_type, frames, message, roots))
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"v{FINGERPRINT_VERSION}:{digest}"
