"""How results reach a person or a script: aligned tables, colour only for a terminal, JSON."""

from __future__ import annotations

import json
import os
import sys
import unicodedata
from collections.abc import Sequence
from typing import IO, Any

RESET = "\x1b[0m"
STYLES = {
    "bold": "\x1b[1m",
    "dim": "\x1b[2m",
    "red": "\x1b[31m",
    "green": "\x1b[32m",
    "yellow": "\x1b[33m",
    "blue": "\x1b[34m",
    "magenta": "\x1b[35m",
    "cyan": "\x1b[36m",
}
# The colour a state is shown in: waiting for a person stands out, ends are quiet.
STATE_STYLES = {
    "hypothesised": "yellow",
    "planned": "yellow",
    "ready": "yellow",
    "handed_off": "magenta",
    "parked": "red",
    "rolled_back": "red",
    "abandoned": "dim",
    "closed": "green",
    "failed": "red",
    "cancelled": "dim",
    "completed": "green",
    "done": "green",
    "blocked": "red",
    "escalated": "magenta",
    "ambiguous": "red",
    "dead": "red",
    "delivered": "green",
}


def wants_colour(stream: IO[str], disabled: bool = False) -> bool:
    """Colour only when a terminal reads the output, and never when NO_COLOR is set
    (https://no-color.org: any non-empty value)."""
    if disabled or os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Output:
    def __init__(
        self,
        *,
        as_json: bool = False,
        colour: bool | None = None,
        out: IO[str] | None = None,
        err: IO[str] | None = None,
    ) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.as_json = as_json
        self.colour = wants_colour(self.out) if colour is None else colour
        self.err_colour = wants_colour(self.err) if colour is None else colour

    def paint(self, text: str, style: str, *, stream: IO[str] | None = None) -> str:
        on = self.err_colour if stream is self.err else self.colour
        if not on or not style or style not in STYLES:
            return text
        return f"{STYLES[style]}{text}{RESET}"

    def state(self, text: str) -> str:
        return self.paint(text, STATE_STYLES.get(text, ""))

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def error(self, text: str) -> None:
        self.err.write(f"{self.paint('error:', 'red', stream=self.err)} {text}\n")

    def note(self, text: str) -> None:
        self.err.write(text + "\n")

    def json(self, data: Any) -> None:
        self.out.write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        styles: dict[int, Any] | None = None,
        empty: str = "(none)",
    ) -> None:
        """Columns padded to their widest cell (by display width); the last column is not
        padded, so long titles do not leave trailing blanks. ``styles`` maps a column index to
        a function from the cell's text to a style name."""
        if not rows:
            self.line(self.paint(empty, "dim"))
            return
        cells = [[_cell(value) for value in row] for row in rows]
        widths = [max([_width(h), *(_width(r[i]) for r in cells)]) for i, h in enumerate(headers)]
        last = len(headers) - 1
        self.line(
            "  ".join(
                self.paint(_pad(h, widths[i], i == last), "bold") for i, h in enumerate(headers)
            ).rstrip()
        )
        for row in cells:
            parts = []
            for i, text in enumerate(row):
                style = (styles or {}).get(i)
                name = style(text) if callable(style) else (style or "")
                parts.append(self.paint(_pad(text, widths[i], i == last), name))
            self.line("  ".join(parts).rstrip())

    def pairs(self, items: Sequence[tuple[str, Any]]) -> None:
        """``name: value`` lines with the values aligned."""
        width = max((_width(name) for name, _ in items), default=0)
        for name, value in items:
            self.line(f"{self.paint(_pad(name + ':', width + 1, False), 'bold')} {_cell(value)}")


def state_style(text: str) -> str:
    return STATE_STYLES.get(text, "")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value) or "-"
    text = str(value)
    return " ".join(text.split()) if "\n" in text or "\t" in text else text


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int, last: bool) -> str:
    return text if last else text + " " * (width - _width(text))


def short_time(value: Any) -> str:
    """``2026-12-06T03:22:16.123456Z`` as ``2026-12-06 03:22:16``: what a person scans."""
    text = str(value or "")
    if len(text) >= 19 and text[10] == "T":
        return f"{text[:10]} {text[11:19]}"
    return text or "-"
