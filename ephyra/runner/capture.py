"""Capturing a command's output: a capped file on disk, an excerpt, and a digest of it all.

A command may print far more than is worth keeping (a test suite stuck in a loop prints
gigabytes). ``Capture`` is fed the output as it arrives and keeps, on disk, the first half of
``keep`` bytes as they come and the last half at the end, with one line between them saying
how much was cut; in memory it holds only that tail. The size and SHA-256 are of everything the
command wrote, so a record still says exactly what was produced.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import NamedTuple


class Captured(NamedTuple):
    size: int  # bytes the command wrote
    sha256: str  # of those bytes
    cut: int  # bytes left out of the file
    excerpt: str  # head and tail, decoded, with the cut said between them


def cut_line(cut: int, size: int) -> str:
    return f"\n[ephyra runner: {cut:,} bytes cut here, of {size:,} in all]\n"


class Capture:
    """Writes ``path`` as output is fed; ``close()`` finishes the file and says what it holds.

    The excerpt is the first ``excerpt_head`` and the last ``excerpt_tail`` bytes (all of it
    when that is everything), decoded as UTF-8 with undecodable bytes replaced, and NUL
    replaced too so the record can be stored in any JSON column."""

    def __init__(self, path: Path, *, keep: int, excerpt_head: int, excerpt_tail: int) -> None:
        self._file = path.open("wb")
        self._head_room = keep // 2
        self._tail_keep = keep - self._head_room
        self._excerpt_head = excerpt_head
        self._excerpt_tail = excerpt_tail
        # The last bytes of the whole stream: enough for the file's tail and for the excerpt
        # (which, for a short output, is all of it).
        self._window = max(self._tail_keep, excerpt_head + excerpt_tail)
        self._tail = bytearray()
        self._first = bytearray()
        self._written = 0  # head bytes written to the file
        self._size = 0
        self._digest = hashlib.sha256()

    def feed(self, chunk: bytes) -> None:
        self._digest.update(chunk)
        self._size += len(chunk)
        if len(self._first) < self._excerpt_head:
            self._first += chunk[: self._excerpt_head - len(self._first)]
        if self._written < self._head_room:
            part = chunk[: self._head_room - self._written]
            self._file.write(part)
            self._written += len(part)
        self._tail += chunk
        # Trimmed in large steps so that keeping the tail costs no more than copying it once.
        if len(self._tail) > 2 * self._window:
            del self._tail[: len(self._tail) - self._window]

    def close(self) -> Captured:
        size, tail = self._size, self._tail
        rest = size - self._written  # bytes not in the file's head
        cut = max(0, rest - self._tail_keep)
        try:
            if cut:
                self._file.write(cut_line(cut, size).encode())
            self._file.write(tail[len(tail) - (rest - cut) :] if rest - cut else b"")
        finally:
            self._file.close()
        if size <= self._excerpt_head + self._excerpt_tail:
            excerpt = _text(bytes(tail[len(tail) - size :]))
        else:
            left = size - self._excerpt_head - self._excerpt_tail
            excerpt = (
                _text(bytes(self._first))
                + cut_line(left, size)
                + _text(bytes(tail[len(tail) - self._excerpt_tail :]))
            )
        return Captured(size=size, sha256=self._digest.hexdigest(), cut=cut, excerpt=excerpt)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").replace("\0", "\ufffd")
