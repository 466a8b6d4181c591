"""New objects written as one pack instead of a loose file each: how a group commit journals.

A loose object is a file of its own, and creating files is most of a journal write (on some
disks several hundred microseconds each). A group of transitions writes all its objects as one
pack: the ``.pack`` and its version-2 ``.idx``, each written under a temporary name and renamed
into ``objects/pack`` (the ``.idx`` last: readers find a pack by its index), before any ref
names a commit in it. Git's pack format (``gitformat-pack``): a header, each object's type and
size then its zlib stream, the SHA-1 of all that; the index: a fan-out table, the sorted object
ids, each object's CRC-32 and offset, the pack's checksum, its own.

Packs written this way pile up, one a group, and so do the loose objects of single events;
``consolidate`` merges them with ``git repack --geometric`` once there are ``PACK_LIMIT`` packs
or about ``LOOSE_LIMIT`` loose objects, so an object lookup never has many indexes or files to
search and git's own repacking has little left to do.
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import tempfile
import zlib
from collections.abc import Callable

import pygit2

PACK_LIMIT = 32  # packs in objects/pack before they are merged
# Loose objects before they are packed too (git's gc.auto default, estimated as git does: from
# one of the 256 fan-out directories). One event at a time writes about six.
LOOSE_LIMIT = 6700
_TYPE_NAMES = {
    pygit2.GIT_OBJECT_COMMIT: b"commit",
    pygit2.GIT_OBJECT_TREE: b"tree",
    pygit2.GIT_OBJECT_BLOB: b"blob",
}


class PackWriter:
    """Collects objects in memory (``add`` has the signature of ``Odb.write``) and writes them
    as one pack (``write``). An object's id is known as soon as it is added."""

    def __init__(self, objects_dir: str, *, fsync: bool = False) -> None:
        self.directory = os.path.join(objects_dir, "pack")
        self.fsync = fsync
        self._objects: dict[bytes, tuple[int, bytes]] = {}  # raw id -> (type, content)

    def __len__(self) -> int:
        return len(self._objects)

    def add(self, kind: int, data: bytes) -> pygit2.Oid:
        digest = hashlib.sha1(b"%s %d\0" % (_TYPE_NAMES[kind], len(data)))
        digest.update(data)
        raw = digest.digest()
        self._objects.setdefault(raw, (kind, data))
        return pygit2.Oid(raw=raw)

    def write(self) -> str | None:
        """Write the pack and its index; the pack's path, or None when nothing was added."""
        if not self._objects:
            return None
        pack = bytearray(b"PACK" + struct.pack(">II", 2, len(self._objects)))
        rows = []  # (id, crc32, offset)
        for raw, (kind, data) in self._objects.items():
            entry = _entry_header(kind, len(data)) + zlib.compress(data, 1)
            rows.append((raw, zlib.crc32(entry), len(pack)))
            pack += entry
        checksum = hashlib.sha1(pack).digest()
        pack += checksum
        rows.sort()
        counts = [0] * 256
        for raw, _, _ in rows:
            counts[raw[0]] += 1
        fanout, total = [], 0
        for count in counts:
            total += count
            fanout.append(total)
        n = len(rows)
        index = bytearray(b"\xfftOc" + struct.pack(">I", 2))
        index += struct.pack(">256I", *fanout)
        index += b"".join(raw for raw, _, _ in rows)
        index += struct.pack(f">{n}I", *(crc for _, crc, _ in rows))
        # A group's pack is far below 2 GiB: every offset fits the 31 bits of the short table.
        index += struct.pack(f">{n}I", *(offset for _, _, offset in rows))
        index += checksum
        index += hashlib.sha1(index).digest()
        base = os.path.join(self.directory, f"pack-{checksum.hex()}")
        self._place(bytes(pack), base + ".pack")
        self._place(bytes(index), base + ".idx")  # last: the index is what makes it a pack
        if self.fsync:
            _fsync_directory(self.directory)
        self._objects.clear()
        return base + ".pack"

    def _place(self, data: bytes, path: str) -> None:
        handle, temporary = tempfile.mkstemp(prefix="tmp_pack_", dir=self.directory)
        try:
            os.write(handle, data)
            if self.fsync:
                os.fsync(handle)
        finally:
            os.close(handle)
        os.chmod(temporary, 0o444)  # as git leaves its packs: read-only
        os.replace(temporary, path)


def _entry_header(kind: int, size: int) -> bytes:
    """An object's header in a pack: its type and its size, seven bits a byte after the first
    four, the high bit saying another byte follows."""
    first = (kind << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray()
    while size:
        out.append(first | 0x80)
        first = size & 0x7F
        size >>= 7
    out.append(first)
    return bytes(out)


def _fsync_directory(path: str) -> None:
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def pack_count(objects_dir: str) -> int:
    try:
        with os.scandir(os.path.join(objects_dir, "pack")) as entries:
            return sum(1 for entry in entries if entry.name.endswith(".idx"))
    except FileNotFoundError:
        return 0


def loose_estimate(objects_dir: str) -> int:
    """About how many loose objects there are: 256 times those in ``objects/17``."""
    try:
        with os.scandir(os.path.join(objects_dir, "17")) as entries:
            return 256 * sum(1 for _ in entries)
    except FileNotFoundError:
        return 0


def consolidate(git_dir: str, objects_dir: str) -> bool:
    """Merge small packs once there are more than ``PACK_LIMIT``, and pack loose objects once
    there are about ``LOOSE_LIMIT``: ``git repack --geometric=2 -d`` rolls the loose objects and
    the small packs into one and leaves pack sizes a geometric progression, so each merge
    touches mostly small packs and the work stays proportional to what was added; it removes
    what it merged. Readers of a pack it removes find the object again in the merged pack
    (libgit2 and git both look again when a pack goes away). True when it ran."""
    if pack_count(objects_dir) <= PACK_LIMIT and loose_estimate(objects_dir) < LOOSE_LIMIT:
        return False
    subprocess.run(
        ["git", "--git-dir", git_dir, "repack", "-d", "-q", "--geometric=2"],
        check=True,
        capture_output=True,
    )
    return True


Writer = Callable[[int, bytes], pygit2.Oid]
