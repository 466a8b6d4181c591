"""The proof bundle in the journal: kept as submitted, so its digest can be recomputed there."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest

from journal.apply import apply, first_mismatch
from journal.store import Journal
from tests.core.lifecycle_helpers import next_event
from tests.core.story import BASE, HEAD, Story

QID = "checkout-500"
REF = f"refs/ephyra/quests/{QID}"


def test_the_journals_bundle_file_rehashes_to_the_digest_with_the_documented_recipe(tmp_path):
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed (apt-get install jq; .ci/run installs it)")
    journal = Journal.init(tmp_path / "mirror.git")
    story, quest = Story(QID), None
    for _ in range(8):  # signal_sensed … patch_recorded: proving
        quest = apply(journal, next_event(story, quest)).decision.quest
    # Submitted without the optional fields of its check: those must not appear when hashed.
    bundle = {"quest": QID, "revision": 1, "risk": "medium", "base": BASE, "head": HEAD}
    bundle["checks"] = [{"name": "tests", "passed": True}]
    canonical = json.dumps(bundle, sort_keys=True, separators=(",", ":")).encode()
    digest = "sha256:" + hashlib.sha256(canonical).hexdigest()
    applied = apply(journal, story("proof_completed", bundle=bundle, digest=digest))
    assert applied.decision.accepted, applied.decision.reason

    # docs/journal.md: the recipe on the journal's own copy of the bundle.
    recipe = (
        f"git --git-dir {journal.path} show {REF}:proof/bundle.json"
        " | jq -cS .bundle | tr -d '\\n' | sha256sum"
    )
    done = subprocess.run(["sh", "-c", recipe], capture_output=True, text=True, check=True)
    assert "sha256:" + done.stdout.split()[0] == digest
    stored = subprocess.run(
        ["git", "--git-dir", journal.path, "show", f"{REF}:event.json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(stored)["bundle"] == bundle
    assert first_mismatch(journal, QID) is None
