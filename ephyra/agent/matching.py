"""Does a failure seen in a test run fail the way production did?

A failure (a failing test from pytest's report, or a probe's output) is read into a
``SeenFailure``: its exception type, its message, and its innermost frame inside the worktree.
It is compared with a ``Target``: the signal's facts, or, when a reproduction runs again at
another commit, the failure the reproduction first showed. Three things are compared:

- **the exception type**, by its last dotted name (production often reports ``CartError``
  where a traceback prints ``shop.cart.CartError``); when both name a module, the modules
  must agree too;
- **the message**, both redacted (production's message was, before it was stored) and
  normalised: quoted values, UUIDs, hex addresses, long hex ids and numbers each become one
  placeholder, so ``cart 0x7f3a of user 42 is 'x'`` equals ``cart 0x9c01 of user 7 is 'y'``;
  a production message cut short (it ends with ``…``) is compared as a prefix, and one that
  holds the other whole (a log line around the exception's message) matches when the held
  one is 12 characters or more;
- **the innermost in-app frame** of the signal against the innermost frame of the failure
  that lies in the worktree outside a virtual environment: the file by path suffix
  (``/srv/app/shop/cart.py`` is ``shop/cart.py``), the function by its last dotted name.
  Line numbers are not compared: code moves between the deployed commit and the head.

A failure matches when every one of the three that the target knows agrees. A target that
knows none of them (no type, no message, no in-app frame) matches nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ephyra.agent.inputs import SignalFacts
from ephyra.redaction.redact import redact

MAX_MESSAGE = 2000  # what is kept of a message: enough to compare, small enough for evidence
MIN_CONTAINED = 12  # a message held inside another counts only from this length

# Directories of a worktree that hold other people's code, not the project's.
_NOT_APP = frozenset(
    {".venv", "venv", ".tox", ".nox", "site-packages", "dist-packages", "node_modules"}
)

_TRACEBACK_START = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"\n]+)", line (?P<line>\d+), in (?P<function>.+?)\s*$')
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::[ \t]?(?P<message>.*))?$")
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
_HEX_ID = re.compile(r"\b(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class SeenFrame:
    """A frame of a traceback: the file as printed (absolute, on this machine), the line,
    the function."""

    file: str
    line: int | None
    function: str


@dataclass(frozen=True)
class ParsedTraceback:
    """The last exception of a Python traceback text: its type as printed, its message
    (every line of it), and its frames, outermost first."""

    exception_type: str
    message: str
    frames: tuple[SeenFrame, ...]


@dataclass(frozen=True)
class SeenFailure:
    """A failure as a run showed it. ``frame`` is the innermost frame in the worktree (its
    file relative to the worktree), ``None`` when none is there. ``node_id`` names the test
    for a pytest failure. The message is redacted and at most ``MAX_MESSAGE`` characters."""

    exception_type: str
    message: str
    frame: SeenFrame | None
    node_id: str | None = None
    # False when the failure came without a traceback (a line of output, a report's message
    # attribute): where it was raised is then unknown, and not compared.
    traceback: bool = True

    def describe(self) -> str:
        """``ZeroDivisionError: division by zero, in total (shop/cart.py:5)``"""
        frame = self.frame
        if frame is None:
            return _describe(self.exception_type, self.message, None, None)
        where = frame.file if frame.line is None else f"{frame.file}:{frame.line}"
        return _describe(self.exception_type, self.message, frame.function, where)

    def to_evidence(self) -> dict[str, Any]:
        frame = self.frame
        return {
            "node_id": self.node_id,
            "traceback": self.traceback,
            "exception_type": self.exception_type[:300],
            "message": self.message[:500],
            "frame": None
            if frame is None
            else {"file": frame.file[:500], "line": frame.line, "function": frame.function[:200]},
        }

    @classmethod
    def from_evidence(cls, data: dict[str, Any]) -> SeenFailure:
        frame = data.get("frame")
        return cls(
            exception_type=str(data.get("exception_type") or ""),
            message=str(data.get("message") or ""),
            frame=None
            if not frame
            else SeenFrame(str(frame["file"]), frame.get("line"), str(frame["function"])),
            node_id=data.get("node_id"),
            traceback=bool(data.get("traceback", True)),
        )


@dataclass(frozen=True)
class Target:
    """What a failure is compared with: an exception type, a message, and the innermost
    in-app frame (its file and function); each may be unknown (empty or ``None``)."""

    exception_type: str
    message: str
    frame_file: str | None
    frame_function: str | None

    @classmethod
    def from_signal(cls, signal: SignalFacts) -> Target:
        frame = next((f for f in signal.frames if f.in_app), None)
        return cls(
            exception_type=signal.exception_type.strip(),
            message=signal.message,
            frame_file=frame.file if frame else None,
            frame_function=frame.function if frame else None,
        )

    @classmethod
    def from_failure(cls, seen: SeenFailure) -> Target:
        """The target a reproduction keeps: the failure it showed at the head."""
        return cls(
            exception_type=seen.exception_type,
            message=seen.message,
            frame_file=seen.frame.file if seen.frame else None,
            frame_function=seen.frame.function if seen.frame else None,
        )

    def describe(self) -> str:
        return _describe(self.exception_type, self.message, self.frame_function, self.frame_file)


def _describe(exception_type: str, message: str, function: str | None, where: str | None) -> str:
    text = exception_type or "(no exception type)"
    first = message.strip().splitlines()[0] if message.strip() else ""
    if first:
        text = f"{text}: {first[:300]}"
    if function:
        text = f"{text}, in {function} ({where})"
    return text


@dataclass(frozen=True)
class Verdict:
    """How a failure compares with a target: each part ``True`` (agrees), ``False``
    (differs) or ``None`` (the target does not know it), and in ``why`` what differed."""

    exception_type: bool | None
    message: bool | None
    frame: bool | None
    why: str

    @property
    def matches(self) -> bool:
        parts = (self.exception_type, self.message, self.frame)
        return any(p is True for p in parts) and not any(p is False for p in parts)


def parse_traceback(text: str) -> ParsedTraceback | None:
    """The last ``Traceback (most recent call last):`` of ``text`` (a chained exception's
    final one), or ``None`` when there is none. Frames are the ``File "…", line N, in f``
    lines; the exception is what follows the last frame's source lines, up to a blank line."""
    lines = text.splitlines()
    start = max((i for i, line in enumerate(lines) if line.strip() == _TRACEBACK_START), default=-1)
    if start < 0:
        return None
    frames: list[SeenFrame] = []
    last = start
    for index in range(start + 1, len(lines)):
        found = _FRAME.match(lines[index])
        if found:
            frames.append(SeenFrame(found["file"], int(found["line"]), found["function"]))
            last = index
        elif frames and not lines[index].startswith("    "):
            break
    rest = lines[last + 1 :]
    while rest and rest[0].startswith("    "):  # the frame's source line and its carets
        rest = rest[1:]
    exception_type, message = split_exception(_until_blank(rest))
    return ParsedTraceback(exception_type, message, tuple(frames))


def split_exception(text: str) -> tuple[str, str]:
    """``("shop.cart.CartError", "cart is broken")`` from ``shop.cart.CartError: cart is
    broken``; ``("", text)`` when the first line does not start with a type name."""
    text = text.strip("\n")
    first, _, more = text.partition("\n")
    found = _EXCEPTION_LINE.match(first.strip())
    if not found or (found["message"] is None and " " in first.strip()):
        return "", text
    message = found["message"] or ""
    if more:
        message = f"{message}\n{more}" if message else more
    return found["type"], message


def _until_blank(lines: list[str]) -> str:
    kept = []
    for line in lines:
        if not line.strip():
            break
        kept.append(line)
    return "\n".join(kept)


def innermost_in_worktree(frames: tuple[SeenFrame, ...], worktree: Path) -> SeenFrame | None:
    """The innermost frame whose file lies in ``worktree`` but not in a virtual environment
    or installed packages, its file made relative to the worktree."""
    roots = {str(worktree), str(worktree.resolve())}
    for frame in reversed(frames):
        for root in roots:
            prefix = root.rstrip("/") + "/"
            if frame.file.startswith(prefix):
                relative = frame.file[len(prefix) :]
                if _NOT_APP.isdisjoint(PurePosixPath(relative).parts):
                    return SeenFrame(relative, frame.line, frame.function)
                break
    return None


def seen_failure(
    parsed: ParsedTraceback, worktree: Path, *, node_id: str | None = None
) -> SeenFailure:
    return SeenFailure(
        exception_type=parsed.exception_type,
        message=redact(parsed.message)[:MAX_MESSAGE],
        frame=innermost_in_worktree(parsed.frames, worktree),
        node_id=node_id,
        traceback=bool(parsed.frames),
    )


def output_failure(text: str, worktree: Path, exception_type: str) -> SeenFailure | None:
    """The failure a command's output shows: its last Python traceback; else, for output
    that is not Python's, the last line holding ``<exception_type>: message`` (after a
    space or at its start: ``E   KeyError: 'x'``, ``ERROR shop.CartError: …``). ``None``
    when there is neither."""
    parsed = parse_traceback(text)
    if parsed is not None and parsed.exception_type:
        return seen_failure(parsed, worktree)
    if not exception_type:
        return None
    line_of = re.compile(
        rf"(?:^|[\s(\[])(?P<type>(?:[A-Za-z_]\w*\.)*{re.escape(short_name(exception_type))})"
        r": (?P<message>.*)$"
    )
    for line in reversed(text.splitlines()):
        found = line_of.search(line)
        if found:
            return SeenFailure(
                found["type"], redact(found["message"])[:MAX_MESSAGE], None, None, False
            )
    return None


def normalise_message(text: str, exception_type: str = "") -> str:
    """The message as compared: redacted, a leading ``Type:`` dropped, quoted values, UUIDs,
    hex addresses, long hex ids and numbers replaced, white space collapsed."""
    text = redact(text[:MAX_MESSAGE]).strip()
    if exception_type:
        for name in {exception_type, short_name(exception_type)}:
            if text.startswith(f"{name}:"):
                text = text[len(name) + 1 :].strip()
                break
    if len(text) >= 2 and text[0] == text[-1] in "'\"" and text[0] not in text[1:-1]:
        # A message that is one quoted value is that value: str(KeyError("k")) quotes the key,
        # and exporters (the OpenTelemetry SDK among them) may send it unquoted.
        text = text[1:-1]
    text = _QUOTED.sub("'…'", text)
    text = _UUID.sub("<id>", text)
    text = _ADDRESS.sub("0x…", text)
    text = _HEX_ID.sub("<id>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()


def short_name(exception_type: str) -> str:
    return exception_type.strip().rsplit(".", 1)[-1]


def _same_type(seen: str, wanted: str) -> bool:
    seen, wanted = seen.strip(), wanted.strip()
    if short_name(seen) != short_name(wanted):
        return False
    if "." in seen and "." in wanted:
        return seen.rsplit(".", 1)[0] == wanted.rsplit(".", 1)[0]
    return True


def _same_message(seen: str, wanted: str, exception_type: str) -> bool:
    cut = wanted.rstrip().endswith("…")
    a = normalise_message(seen, exception_type)
    b = normalise_message(wanted.rstrip().removesuffix("…") if cut else wanted, exception_type)
    if a == b or (cut and b and a.startswith(b)):
        return True
    shorter, longer = sorted((a, b), key=len)
    return len(shorter) >= MIN_CONTAINED and shorter in longer


def same_path(one: str, other: str) -> bool:
    """Whether two paths name the same file by their common suffix: the shorter one's
    components end the longer one's (``shop/cart.py`` and ``/srv/app/shop/cart.py``)."""
    a = [p for p in PurePosixPath(one.replace("\\", "/")).parts if p not in ("/", ".")]
    b = [p for p in PurePosixPath(other.replace("\\", "/")).parts if p not in ("/", ".")]
    if not a or not b:
        return False
    shorter, longer = sorted((a, b), key=len)
    return longer[-len(shorter) :] == shorter


def compare(seen: SeenFailure, target: Target) -> Verdict:
    """How ``seen`` compares with ``target``; see the module's docstring."""
    why = []
    type_ok = None
    if target.exception_type:
        type_ok = _same_type(seen.exception_type, target.exception_type)
        if not type_ok:
            named = seen.exception_type or "not named"
            why.append(f"the exception is {named}, not {target.exception_type}")
    message_ok = None
    if target.message.strip():
        message_ok = _same_message(seen.message, target.message, target.exception_type)
        if not message_ok:
            why.append("the message differs")
    frame_ok = None
    if target.frame_file and target.frame_function and seen.traceback:
        frame = seen.frame
        frame_ok = (
            frame is not None
            and same_path(frame.file, target.frame_file)
            and short_name(frame.function) == short_name(target.frame_function)
        )
        if not frame_ok:
            where = (
                "no frame in the worktree" if frame is None else f"{frame.file} in {frame.function}"
            )
            why.append(
                f"it is raised from {where}, not {target.frame_file} in {target.frame_function}"
            )
    if not why and type_ok is None and message_ok is None and frame_ok is None:
        why.append("the signal names no exception type, message or in-app frame to compare")
    return Verdict(type_ok, message_ok, frame_ok, "; ".join(why))
