"""Evidence: a file is stored under the data directory by its SHA-256, journaled by digest, served
only to people of its workspace; a file past the cap, a bad link or empty text is refused and
nothing is stored or journaled; the form names the evidence each transition requires."""

from __future__ import annotations

import hashlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from missions.journal import mission_journal
from missions.models import Mission
from tests.missions.conftest import message_after, move, offered, page_url, send
from tests.quests.conftest import person

pytestmark = pytest.mark.django_db


def test_an_uploaded_file_is_stored_by_digest_journaled_and_served_to_its_workspace_only(
    client, people, workspace, other_workspace, planned, data_dir
):
    m = planned
    body = b"pytest: 212 passed\n"
    sha = hashlib.sha256(body).hexdigest()
    move(client, m, "wp1", "in_progress", evidence="go")
    client.force_login(people["mia"])
    form = offered(client, m, "wp1", "checking")
    upload = SimpleUploadedFile("../../etc/report.txt", body, content_type="text/plain")
    answer = send(client, form, evidence_kind="file", evidence_file=upload)
    assert answer["X-Ephyra-Outcome"] == "applied"

    stored = data_dir / "evidence" / "shop" / sha[:2] / sha
    assert stored.read_bytes() == body
    item = mission_journal(workspace).load(m).request["evidence"]["result_produced"]
    assert item == {
        "kind": "file",
        "sha256": sha,
        "name": "report.txt",
        "size": len(body),
        "text": f"file sha256:{sha} report.txt ({len(body)} bytes)",
    }
    page = client.get(page_url(m)).content.decode()
    url = f"/missions/shop/evidence/{sha}/report.txt"
    assert f'href="{url}"' in page
    served = client.get(url)
    assert served.status_code == 200
    assert served["Content-Type"] == "application/octet-stream"
    assert served["Content-Disposition"].startswith("attachment")
    assert b"".join(served.streaming_content) == body

    client.force_login(person("olga", other=["admin"]))
    assert client.get(url).status_code == 404
    assert client.get(f"/missions/other/evidence/{sha}/report.txt").status_code == 404


def test_a_file_past_the_cap_is_refused_with_413_and_nothing_is_stored_or_journaled(
    client, people, workspace, planned, data_dir, settings
):
    settings.EPHYRA_EVIDENCE_MAX_BYTES = 2048
    m = planned
    move(client, m, "wp1", "in_progress", evidence="go")
    head = Mission.objects.get(mission_id=m).journal_head
    client.force_login(people["mia"])
    form = offered(client, m, "wp1", "checking")
    upload = SimpleUploadedFile("big.log", b"x" * 4096)
    answer = send(client, form, evidence_kind="file", evidence_file=upload)
    assert (answer.status_code, answer["X-Ephyra-Outcome"]) == (413, "invalid")
    assert "the file “big.log” is larger than 2,048 bytes" in answer.content.decode()
    assert Mission.objects.get(mission_id=m).journal_head == head
    assert [p for p in (data_dir / "evidence").rglob("*") if p.is_file()] == []


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"evidence_kind": "text", "evidence_text": "  "}, "the evidence text is empty"),
        (
            {"evidence_kind": "link", "evidence_link": "javascript:alert(1)"},
            "the evidence link must be an http or https URL",
        ),
        ({"evidence_kind": "file"}, "no file was uploaded"),
    ],
)
def test_bad_evidence_is_refused_in_words_and_changes_nothing(
    client, people, planned, fields, said
):
    m = planned
    head = Mission.objects.get(mission_id=m).journal_head
    form = offered(client, m, m, "paused")
    answer = send(client, form, **fields)
    assert (answer.status_code, answer["X-Ephyra-Outcome"]) == (303, "invalid")
    assert message_after(client, answer).startswith(f"Not done: {said}")
    assert Mission.objects.get(mission_id=m).journal_head == head


def test_each_form_names_the_evidence_its_transition_requires(client, people, planned):
    page = client.get(page_url(planned)).content.decode()
    assert "Required evidence: <code>no_progress</code>" in page  # RUNNING -> PAUSED
    assert "Required evidence: <code>start_approved</code>" in page  # a WP READY -> IN_PROGRESS
    assert "Required evidence: <code>final_error</code>" in page  # RUNNING -> FAILED
