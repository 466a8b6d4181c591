"""The path a quest took, drawn as an SVG of the sixteen states, on the server.

The main line runs left to right in two rows; the four states off the main line sit below it.
Each state is a box; the ones the quest visited are filled, the current one is outlined
strongly and named in words too (colour is never the only signal). Every transition the quest
actually took is an arrow. Plain SVG: no script, no library.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from html import escape

from ephyra.core.states import State

W, H, GAP_X, GAP_Y = 118, 34, 24, 44
TOP = 18  # room above the first row for the "now" tag
# (column, row) of each state: the main line in two rows of six, the branches beneath.
PLACES: dict[State, tuple[int, int]] = {
    State.SENSED: (0, 0),
    State.TRIAGED: (1, 0),
    State.RESEARCHING: (2, 0),
    State.HYPOTHESISED: (3, 0),
    State.REPRODUCING: (4, 0),
    State.PLANNED: (5, 0),
    State.PATCHING: (5, 1),
    State.PROVING: (4, 1),
    State.READY: (3, 1),
    State.LANDING: (2, 1),
    State.WATCHING: (1, 1),
    State.CLOSED: (0, 1),
    State.ROLLED_BACK: (1, 2),
    State.PARKED: (2, 2),
    State.HANDED_OFF: (3, 2),
    State.ABANDONED: (4, 2),
}
MAIN_LINE = [
    State.SENSED,
    State.TRIAGED,
    State.RESEARCHING,
    State.HYPOTHESISED,
    State.REPRODUCING,
    State.PLANNED,
    State.PATCHING,
    State.PROVING,
    State.READY,
    State.LANDING,
    State.WATCHING,
    State.CLOSED,
]
CHECKPOINTS = {State.HYPOTHESISED: "A", State.PLANNED: "B", State.READY: "C"}


@dataclass(frozen=True)
class Step:
    before: str | None
    after: str


def _box(state: State) -> tuple[float, float]:
    column, row = PLACES[state]
    return 10 + column * (W + GAP_X), TOP + row * (H + GAP_Y)


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


def _line(a: State, b: State, extra: str = "") -> str:
    x1, y1, x2, y2 = _edge(a, b)
    return f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}"{extra}/>'


def state_path_svg(steps: list[Step], current: str) -> str:
    """The SVG markup: ``steps`` are the transitions taken, oldest first."""
    visited = {State(s.after) for s in steps} | {State(s.before) for s in steps if s.before}
    taken = {(State(s.before), State(s.after)) for s in steps if s.before and s.before != s.after}
    now = State(current)
    width = 10 + 6 * (W + GAP_X)
    height = TOP + 3 * (H + GAP_Y)
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
            f'<text class="now-tag" x="{x + W / 2:.0f}" y="{y - 5:.0f}" '
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
