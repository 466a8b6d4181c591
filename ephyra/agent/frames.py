"""From a stack frame to the repository: which file it is, and which lines are its function.

Production paths differ from the repository's (``/srv/app/shop/cart.py`` is ``shop/cart.py``),
so a frame's file is the repository's file that shares the longest run of trailing path
components with it. Research maps the signal's frames this way, and bisect uses the same
mapping to say which frames the culprit changed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ephyra.agent.gitcli import git, run_git
from ephyra.agent.inputs import Frame

# A frame of code that has no file: an interpreter's own, a string passed to eval.
_NOT_A_FILE = re.compile(r"^<.*>$")
# Python's definitions, to find the lines of a frame's function.
_DEF = re.compile(r"^(?P<indent>[ \t]*)(?:async[ \t]+)?(?:def|class)[ \t]+(?P<name>\w+)")


@dataclass(frozen=True)
class FrameMatch:
    """One frame and the repository's file it is (``path``), or why it is none."""

    index: int  # the frame's place in the signal, innermost first (0)
    frame: Frame
    path: str | None
    why: str
    candidates: tuple[str, ...] = ()  # when several files fit equally well

    def to_evidence(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "frame": self.index,
            "file": self.frame.file[:500],
            "line": self.frame.line,
            "function": self.frame.function[:200],
            "in_app": self.frame.in_app,
            "path": self.path,
            "why": self.why,
        }
        if self.candidates:
            data["candidates"] = list(self.candidates[:5])
        return data


def repository_files(worktree: Path, commit: str) -> list[str]:
    """Every file of ``commit``'s tree (paths relative to the root)."""
    out = git(worktree, "ls-tree", "-r", "-z", "--name-only", "--full-tree", commit)
    return [path for path in out.split("\0") if path]


def map_frames(files: list[str], frames: tuple[Frame, ...]) -> tuple[FrameMatch, ...]:
    """Each frame's file in ``files`` by the longest common suffix of path components.

    A tie is broken by the frame's module (``shop.cart`` is ``shop/cart.py``); a tie that
    stays is no match (the candidates are named). A frame outside the application needs two
    components in common: sharing a file name (``__init__.py``, ``base.py``) with the
    repository says nothing about library code."""
    by_name: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for path in files:
        parts = tuple(path.split("/"))
        by_name[parts[-1]].append(parts)
    return tuple(_match(index, frame, by_name) for index, frame in enumerate(frames))


def _match(index: int, frame: Frame, by_name: dict[str, list[tuple[str, ...]]]) -> FrameMatch:
    raw = frame.file.replace("\\", "/").strip()
    if not raw or _NOT_A_FILE.match(raw):
        return FrameMatch(index, frame, None, "the frame names no file")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if parts and re.fullmatch(r"[A-Za-z]:", parts[0]):  # a Windows drive
        parts = parts[1:]
    if not parts:
        return FrameMatch(index, frame, None, "the frame names no file")
    scored = [(_common_suffix(parts, c), c) for c in by_name.get(parts[-1], [])]
    if not scored:
        return FrameMatch(index, frame, None, f"no file of the repository is named {parts[-1]}")
    best = max(score for score, _ in scored)
    winners = ["/".join(c) for score, c in scored if score == best]
    if not frame.in_app and best < 2:
        return FrameMatch(
            index, frame, None, "library code: only the file name matches a file of the repository"
        )
    if len(winners) > 1 and frame.module:
        module = frame.module.replace(".", "/")
        by_module = [w for w in winners if w.endswith((f"{module}.py", f"{module}/__init__.py"))]
        if by_module:
            winners = by_module
    if len(winners) > 1:
        return FrameMatch(
            index,
            frame,
            None,
            f"{len(winners)} files end with the same {best} path component(s)",
            tuple(sorted(winners)),
        )
    return FrameMatch(index, frame, winners[0], f"the last {best} path component(s) match")


def _common_suffix(a: list[str], b: tuple[str, ...]) -> int:
    count = 0
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if x != y:
            break
        count += 1
    return count


def file_lines(worktree: Path, commit: str, path: str) -> list[str] | None:
    """The file's lines at ``commit``; ``None`` when it is not there (or not text)."""
    done = run_git(worktree, "show", f"{commit}:{path}")
    return done.stdout.splitlines() if done.returncode == 0 else None


def function_range(lines: list[str], function: str, line: int | None) -> tuple[int, int] | None:
    """The lines (1-based, inclusive) of the definition of ``function`` that holds ``line``
    (or the first one, when the line is unknown), for Python's ``def`` and ``class``: from the
    ``def`` to the last line indented deeper than it. ``None`` when none is found; for other
    languages the caller falls back to the line itself."""
    starts = []
    for number, text in enumerate(lines, 1):
        found = _DEF.match(text)
        if found and found["name"] == function:
            starts.append((number, len(found["indent"].expandtabs())))
    for start, indent in reversed(starts):
        end = _block_end(lines, start, indent)
        if line is None or start <= line <= end:
            return start, end
    return None


def _block_end(lines: list[str], start: int, indent: int) -> int:
    end = start
    for number in range(start + 1, len(lines) + 1):
        text = lines[number - 1]
        if not text.strip():
            continue
        if len(text) - len(text.lstrip()) <= indent and not text.lstrip().startswith((")", "]")):
            break
        end = number
    return end


def frame_lines(lines: list[str] | None, frame: Frame) -> tuple[int, int] | None:
    """The lines that stand for the frame: its function's (the definition holding the
    frame's line, else the first of that name), else its own line."""
    if lines is None:
        return None
    # The frame's line is production's; the file here may be another version of it, where
    # the function moved: then its first definition stands for it.
    found = function_range(lines, frame.function, frame.line) or function_range(
        lines, frame.function, None
    )
    if found is not None:
        return found
    if frame.line is not None and 1 <= frame.line <= len(lines):
        return frame.line, frame.line
    return None


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def changed_lines(
    worktree: Path, commit: str, parent: str | None
) -> dict[str, list[tuple[int, int]]]:
    """The lines each file's diff touches in ``commit`` against ``parent`` (its first parent;
    the empty tree for a root commit), as ranges of the new file. A deletion touches the line
    where the removed lines were."""
    base = parent if parent is not None else git(worktree, "hash-object", "-t", "tree", "/dev/null")
    out = git(worktree, "diff", "--no-renames", "--no-color", "--no-ext-diff", "-U0", base, commit)
    touched: dict[str, list[tuple[int, int]]] = defaultdict(list)
    current = None
    in_header = False  # between "diff --git" and the first hunk: "+++ " names the file there
    for text in out.splitlines():
        if text.startswith("diff --git "):
            current, in_header = None, True
        elif in_header and text.startswith("+++ "):
            name = text[4:]
            current = name[2:] if name.startswith("b/") else None  # /dev/null: deleted
        elif text.startswith("@@"):
            in_header = False
            hunk = _HUNK.match(text)
            if hunk and current is not None:
                first, count = int(hunk[1]), int(hunk[2] if hunk[2] is not None else 1)
                touched[current].append((first, first + max(count, 1) - 1))
    return dict(touched)


def overlaps(ranges: list[tuple[int, int]], span: tuple[int, int]) -> bool:
    return any(start <= span[1] and span[0] <= end for start, end in ranges)
