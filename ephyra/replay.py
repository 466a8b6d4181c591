"""Replay: fold a file of events through the machine and print every decision as JSON lines.

This is how anyone checks the machine: the same file and policy always print the same lines.
Used by ``python manage.py replay`` and by the ``ephyra-replay`` console script.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from ephyra.core.events import BaseEvent, parse_event
from ephyra.core.machine import FoldResult, fold
from ephyra.policy import DEFAULT_POLICY_PATH, PolicyError, load_policy

EXIT_OK, EXIT_INVALID, EXIT_UNREADABLE = 0, 1, 2


class EventFileError(ValueError):
    pass


def read_events(lines: Iterable[str | bytes], source: str = "<events>") -> Iterator[BaseEvent]:
    """Events from JSON lines; blank lines and ``#`` comments are skipped. Lines given as bytes
    (a file opened in binary) are decoded as UTF-8 one at a time, so a line that is not UTF-8 is
    an ``EventFileError`` naming its line, not a ``UnicodeDecodeError`` from the file object."""
    for number, line in enumerate(lines, start=1):
        if isinstance(line, bytes):
            line = _decoded(line, source, number)
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            yield parse_event(text)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(event)"
            raise EventFileError(f"{source}:{number}: {where}: {first['msg']}") from None


def _decoded(line: bytes, source: str, number: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EventFileError(
            f"{source}:{number}: the line is not UTF-8 text ({exc.reason}: "
            f"byte 0x{line[exc.start]:02x} at byte {exc.start + 1})"
        ) from None


def replay_file(path: Path, policy_path: Path, out: IO[str], err: IO[str]) -> int:
    try:
        policy = load_policy(policy_path).machine()
        with path.open("rb") as handle:  # decoded line by line: see read_events
            events = list(read_events(handle, str(path)))
    except (PolicyError, EventFileError) as exc:
        err.write(f"{exc}\n")
        return EXIT_UNREADABLE
    except OSError as exc:
        err.write(f"{path}: cannot read: {exc.strerror}\n")
        return EXIT_UNREADABLE
    result = fold(events, policy)
    write_decisions(result, out)
    return report_invalid(result, err)


def write_decisions(result: FoldResult, out: IO[str]) -> None:
    for decision in result.decisions:
        out.write(json.dumps(decision.to_dict(), sort_keys=True) + "\n")


def report_invalid(result: FoldResult, err: IO[str]) -> int:
    bad = result.first_invalid
    if bad is None:
        return EXIT_OK
    err.write(
        f"invalid transition: event {bad.event_id} ({bad.event_type}) for quest {bad.quest_id} "
        f"in state {bad.state}: {bad.reason}\n"
    )
    return EXIT_INVALID


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="ephyra-replay", description="Fold events through the quest machine."
    )
    parser.add_argument("file", type=Path, help="events as JSON lines")
    parser.add_argument(
        "--policy",
        type=Path,
        default=DEFAULT_POLICY_PATH,
        help="autonomy policy (YAML); default: the built-in default policy",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return replay_file(args.file, args.policy, sys.stdout, sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
