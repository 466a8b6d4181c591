"""Where a run's artifacts go: ``<name>.log`` (the capped output) and ``<name>.json`` (its record).

The record is ``RunResult.to_dict()``: the command, the working directory, the names (never
the values) of the environment variables, the limits, how it ended, its duration, the output
excerpt and the size and SHA-256 of the whole output. It is written here as the command left
it; the excerpt is redacted on the Django side, where the record is stored beside the event
that links it, like every other text that reaches people.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ephyra.core.ports import RunRequest, RunResult


def output_path(request: RunRequest) -> Path:
    return Path(request.artifacts_dir) / f"{request.name}.log"


def record_path(request: RunRequest) -> Path:
    return Path(request.artifacts_dir) / f"{request.name}.json"


def write_record(result: RunResult, path: Path) -> None:
    """Write the record whole or not at all: a reader never sees half of one."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)


def read_record(path: Path) -> RunResult:
    return RunResult.from_dict(json.loads(path.read_text()))
