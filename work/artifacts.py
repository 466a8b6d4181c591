"""The runs of a step, kept as evidence: redacted before they are stored for good.

The runner writes each run's output (``<name>.log``, capped) and its record (``<name>.json``)
as the command produced them: a test suite may print a token from its environment, a stack
trace may hold a password. When the step ends, ``seal`` redacts every output and record in its
folder like everything else Ephyra stores (``ephyra.redaction``), and records the SHA-256 of the
output as stored (``stored_sha256``) beside the digest of what the command wrote (which reveals
nothing, and still names the run). Evidence names a run by its stored digest, which anyone can
recompute from the file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ephyra.redaction.redact import redact

SEALED = ".sealed"
# The other files a step leaves beside its runs (a JUnit report, the prompt an agent read, a
# refused diff): text too, and redacted too.
TEXTS = frozenset({".xml", ".md", ".diff", ".txt", ".patch"})


def seal(folder: Path) -> list[dict]:
    """Redact every run of ``folder`` in place; the records, as stored. Sealing twice is a
    no-op (a marker file says it was done)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    records = []
    for record_path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or "output_sha256" not in record:
            continue  # not a run record (a report the step wrote, say)
        if not (folder / SEALED).exists():
            record = _seal_one(folder, record_path, record)
        records.append(record)
    if not (folder / SEALED).exists():
        for other in sorted(folder.rglob("*")):
            if other.is_file() and other.suffix in TEXTS and not other.is_symlink():
                data = other.read_bytes().decode("utf-8", errors="replace")
                other.write_text(redact(data), encoding="utf-8")
    (folder / SEALED).touch()
    return records


def _seal_one(folder: Path, record_path: Path, record: dict) -> dict:
    log = folder / f"{record_path.stem}.log"
    if log.exists():
        text = log.read_bytes().decode("utf-8", errors="replace")
        stored = redact(text).encode("utf-8")
        log.write_bytes(stored)
        record["stored_sha256"] = hashlib.sha256(stored).hexdigest()
    for field in ("output_excerpt",):
        if isinstance(record.get(field), str):
            record[field] = redact(record[field])
    record["argv"] = [redact(word) for word in record.get("argv", [])]
    record_path.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    return record
