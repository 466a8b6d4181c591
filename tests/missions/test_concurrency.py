"""People moving different work packages of one mission at the same moment: every move lands,
none overwrites another (the journal's compare-and-swap loses races, the loser decides again on
the new head), and the projection ends at the journal's head. PostgreSQL only: SQLite's one
writer turns the race into a queue."""

from __future__ import annotations

import sys
import threading

import pytest
from django.db import connection, connections

from missions import services
from missions.decide import replay_mission
from missions.evidence import Evidence
from missions.journal import mission_journal
from missions.models import Mission, WorkPackage
from quests.roles import Role
from tests.audit_tampering import erase_audit_log
from tests.quests.conftest import person

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="a race needs two writers"),
]
TEXT = Evidence("text", text="noted")
WPS, CYCLES = 4, 5


@pytest.fixture(autouse=True)
def _flushable():
    yield
    erase_audit_log()  # the append-only audit rows would refuse the flush after the test


def test_concurrent_moves_of_different_work_packages_all_land(workspace, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    ada = person("ada", shop=[Role.ADMIN])
    mission = services.mission_create(ada, workspace, title="Race", key="c").mission

    def lead(subject: str, to: str, key: str) -> None:
        row = Mission.objects.get(pk=mission.pk)
        if subject == row.mission_id:
            services.mission_transition(ada, row, to=to, role="lead", evidence=TEXT, key=key)
        else:
            services.wp_transition(ada, row, subject, to=to, role="lead", evidence=TEXT, key=key)

    for n in range(1, WPS + 1):
        services.wp_add(ada, mission, title=f"part {n}", key=f"a{n}")
    lead("m1", "planning", "p")
    for n in range(1, WPS + 1):
        lead(f"wp{n}", "ready", f"r{n}")
    lead("m1", "ready", "r")
    lead("m1", "running", "go")
    errors: list[BaseException] = []
    start = threading.Barrier(WPS)

    def work(n: int) -> None:
        try:
            start.wait()
            lead(f"wp{n}", "in_progress", f"s{n}")
            for cycle in range(CYCLES):  # each unblock is a recovery: one ledger entry each
                lead(f"wp{n}", "blocked", f"b{n}-{cycle}")
                lead(f"wp{n}", "in_progress", f"u{n}-{cycle}")
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(1, WPS + 1)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often, so they interleave inside a write
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    states = set(WorkPackage.objects.filter(mission=mission).values_list("state", flat=True))
    assert states == {"in_progress"}
    row = Mission.objects.get(pk=mission.pk)
    journal = mission_journal(workspace)
    assert row.journal_head == str(journal.head(row.mission_id))
    assert row.revision == 1 + WPS + 1 + WPS + 2 + WPS * (1 + 2 * CYCLES)
    ledger = row.data["ledger"]
    assert [entry["sequence"] for entry in ledger] == list(range(1, WPS * CYCLES + 1))
    assert replay_mission(journal, row.mission_id) is None
