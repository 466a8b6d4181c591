"""The path a quest took, drawn as an SVG of the sixteen states, on the server.

The main line runs left to right in one row; the four states off it sit in a row beneath, so a
line between the rows never crosses a box. A step back along the main line (a revision, a proof
that failed) or a skip over a state arcs above the row. Each state is a box; the ones the quest
visited are filled, the current one is outlined strongly and tagged "now" in words (colour is
never the only signal). Every transition the quest took is an arrow. Plain SVG: no script.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from html import escape

from ephyra.core.states import MAIN_LINE, State

W, H, GAP_X = 106, 32, 10
TOP = 64  # room above the main line for the arcs and the "now" tag
ROW_GAP = 70
# (column, row): the main line in row 0; the branches under the states they mostly leave.
PLACES: dict[State, tuple[float, int]] = {s: (n, 0) for n, s in enumerate(MAIN_LINE)}
PLACES |= {
    State.PARKED: (2.5, 1),
    State.HANDED_OFF: (5, 1),
    State.ABANDONED: (7.5, 1),
    State.ROLLED_BACK: (10, 1),
}
CHECKPOINTS = {State.HYPOTHESISED: "A", State.PLANNED: "B", State.READY: "C"}


@dataclass(frozen=True)
class Step:
    before: str | None
    after: str


def _box(state: State) -> tuple[float, float]:
    column, row = PLACES[state]
    return 10 + column * (W + GAP_X), TOP + row * (H + ROW_GAP)


def _centre(state: State) -> tuple[float, float]:
    x, y = _box(state)
    return x + W / 2, y + H / 2


def _edge(a: State, b: State) -> tuple[float, float, float, float]:
    """A line from the border of ``a`` toward ``b``, ending at the border of ``b``."""
    (ax, ay), (bx, by) = _centre(a), _centre(b)
    dx, dy = bx - ax, by - ay

    def cut(dx: float, dy: float) -> tuple[float, float]:
        if dx == 0 and dy == 0:
            return 0, 0
        scale = min(
            (W / 2) / abs(dx) if dx else float("inf"),
            (H / 2) / abs(dy) if dy else float("inf"),
        )
        return dx * scale, dy * scale

    sx, sy = cut(dx, dy)
    return ax + sx, ay + sy, bx - sx, by - sy


_ORDER = {state: n for n, state in enumerate(State)}
_MAIN_INDEX = {state: n for n, state in enumerate(MAIN_LINE)}


def _line(a: State, b: State, extra: str = "") -> str:
    if a in _MAIN_INDEX and b in _MAIN_INDEX and _MAIN_INDEX[b] - _MAIN_INDEX[a] != 1:
        return _arc(a, b, extra)
    x1, y1, x2, y2 = _edge(a, b)
    return f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}"{extra}/>'


def _arc(a: State, b: State, extra: str) -> str:
    """From the top of ``a`` to the top of ``b``, arcing over the boxes between them."""
    (ax, _), (bx, _) = _centre(a), _centre(b)
    top = TOP
    lift = min(TOP - 8, 18 + 6 * abs(_MAIN_INDEX[b] - _MAIN_INDEX[a]))
    path = f"M{ax:.0f} {top} Q{(ax + bx) / 2:.0f} {top - 2 * lift} {bx:.0f} {top}"
    return f'<path d="{path}" fill="none"{extra}/>'



def state_path_svg(steps: list[Step], current: str) -> str:
    """The SVG markup: ``steps`` are the transitions taken, oldest first."""
    visited = {State(s.after) for s in steps} | {State(s.before) for s in steps if s.before}
    taken = {(State(s.before), State(s.after)) for s in steps if s.before and s.before != s.after}
    now = State(current)
    width = 20 + len(MAIN_LINE) * (W + GAP_X)
    height = TOP + 2 * H + ROW_GAP + 10
    names = ", ".join(str(s) for s in sorted(visited, key=_ORDER.__getitem__))
    parts = [
        f'<svg class="statepath" viewBox="0 0 {width} {height}" role="img" '
        f'aria-labelledby="statepath-title" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="statepath-title">The path of the quest: now {escape(str(now))}; '
        f"visited {escape(names)}</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0 0L10 5L0 10z"/></marker>'
        "</defs>",
        '<g class="edges">',
    ]
    parts += [_line(a, b) for a, b in itertools.pairwise(MAIN_LINE) if (a, b) not in taken]
    parts.append('</g><g class="edges taken">')
    ordered = sorted(taken, key=lambda pair: (_ORDER[pair[0]], _ORDER[pair[1]]))
    parts += [_line(a, b, ' marker-end="url(#arrow)"') for a, b in ordered]
    parts.append("</g>")
    for state in State:
        x, y = _box(state)
        classes = ["state"]
        if state in visited:
            classes.append("visited")
        if state is now:
            classes.append("current")
        label = str(state).replace("_", " ")
        if state in CHECKPOINTS:
            label += f" [{CHECKPOINTS[state]}]"
        now_tag = (
            f'<text class="now-tag" x="{x + W / 2:.0f}" '
            f'y="{y + H + 14 if PLACES[state][1] else y - 5:.0f}" '
            'text-anchor="middle">now</text>'
            if state is now
            else ""
        )
        parts.append(
            f'<g class="{" ".join(classes)}" data-state="{state}">'
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{W}" height="{H}" rx="6"/>'
            f'<text x="{x + W / 2:.0f}" y="{y + H / 2 + 4:.0f}" text-anchor="middle">'
            f"{escape(label)}</text>{now_tag}</g>"
        )
    parts.append("</svg>")
    return "\n".join(parts)
