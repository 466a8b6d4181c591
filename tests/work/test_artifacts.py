"""A step's runs are kept redacted, with the digest of what is stored."""

from __future__ import annotations

import hashlib
import json

from ephyra.core.ports import RunLimits, RunRequest
from ephyra.runner import LocalRunner
from work.artifacts import seal

TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def test_a_secret_a_run_printed_is_not_kept_and_the_stored_digest_is_of_the_stored_file(
    tmp_path,
):
    folder = tmp_path / "artifacts"
    LocalRunner().run(
        RunRequest(
            argv=("sh", "-c", f"echo token={TOKEN}; echo done"),
            cwd=str(tmp_path),
            artifacts_dir=str(folder),
            name="leaky",
            env={},
            limits=RunLimits(wall_seconds=30),
        )
    )
    (folder / "report.xml").write_text(f"<failure>{TOKEN}</failure>")
    [record] = seal(folder)
    stored = (folder / "leaky.log").read_bytes()
    assert TOKEN.encode() not in stored and b"done" in stored
    assert TOKEN not in (folder / "report.xml").read_text()
    assert TOKEN not in json.dumps(record)
    assert record["stored_sha256"] == hashlib.sha256(stored).hexdigest()
    assert seal(folder) == [record]  # sealing again changes nothing
