"""The OpenAPI schema: it validates with no warning, its documentation page loads only our own
files, and schemathesis, sending generated requests for every operation to a live server with a
seeded database, finds no server error and no answer that breaks the schema."""

from __future__ import annotations

import re
import time

import pytest
import schemathesis
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from ephyra.policy import DEFAULT_POLICY_PATH
from ledger.models import Operation
from missions import services
from quests.policies import policy_propose
from quests.roles import Role
from tests.api.conftest import token_for
from tests.audit_tampering import erase_audit_log
from tests.quests.conftest import drive, person

EXAMPLES = 10  # per operation; the whole run stays near ten seconds


@pytest.mark.django_db
def test_the_schema_validates_as_openapi_with_no_warning(client, tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    served = client.get("/api/schema/?format=json")
    assert served.status_code == 200
    schema = served.json()
    assert schema["openapi"].startswith("3.")
    paths = schema["paths"]
    assert "/api/v1/workspaces/{ws}/quests/{quest_id}/claim" in paths
    claim = paths["/api/v1/workspaces/{ws}/quests/{quest_id}/claim"]["post"]
    assert set(claim["responses"]) >= {
        "200",
        "202",
        "400",
        "401",
        "403",
        "404",
        "409",
        "415",
        "422",
    }
    assert claim["responses"]["409"]["content"]["application/problem+json"]
    # No credentials needed, and none looked at: a wrong one does not lock the schema away.
    assert client.get("/api/schema/", HTTP_AUTHORIZATION="Basic Zm9vOmJhcg==").status_code == 200


@pytest.mark.django_db
def test_the_documentation_page_loads_every_asset_from_our_own_server(client):
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and all(a.startswith("/static/") for a in assets), assets
    assert "//cdn" not in html and "unpkg" not in html and "jsdelivr" not in html
    for asset in assets:
        answer = client.get(asset)
        body = b"".join(answer.streaming_content) if answer.streaming else answer.content
        answer.close()
        assert answer.status_code == 200 and body, asset


@pytest.fixture
def seeded(workspace, other_workspace, settings):
    settings.EPHYRA_API_RATE_LIMIT = 100_000
    drive(workspace, "q1", "hypothesised")
    drive(workspace, "q2", "planned")
    op = Operation.objects.filter(workspace=workspace).order_by("pk").first()
    Operation.objects.filter(pk=op.pk).update(state=Operation.State.AMBIGUOUS)
    ada = person("ada", shop=[Role.ADMIN])
    lena = person("lena", shop=[Role.ADMIN])
    proposal = policy_propose(lena, workspace, DEFAULT_POLICY_PATH.read_text() + "\n")
    done = services.mission_create(ada, workspace, title="Checkout", key="m1")
    services.wp_add(ada, done.mission, title="Reproduce", key="wp1")
    yield {
        "token": token_for(ada, role="admin"),
        "path": {"ws": "shop", "quest_id": "q1", "mid": "m1", "wp": "wp1", "op_key": op.key,
                 "n": 1, "proposal_id": proposal.pk},
    }  # fmt: skip
    erase_audit_log()  # the append-only rows would refuse the flush after the test


@pytest.mark.django_db(transaction=True)
def test_schemathesis_finds_no_server_error_and_no_answer_breaking_the_schema(live_server, seeded):
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/?format=json")
    checks = [
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
        content_type_conformance,
    ]
    headers = {"Authorization": f"Bearer {seeded['token']}"}
    failures: list[str] = []
    operations = 0
    statuses: dict[str, set[int]] = {}
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        names = set(re.findall(r"{(\w+)}", operation.path))
        path = {k: v for k, v in seeded["path"].items() if k in names}
        strategy = operation.as_strategy(path_parameters=path, headers=headers)

        @given(case=strategy)
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def run(case):
            response = case.call(base_url=live_server.url, timeout=30)
            statuses.setdefault(f"{case.method.upper()} {case.path}", set()).add(
                response.status_code
            )
            case.validate_response(response, checks=checks)

        try:
            run()
        except Exception as exc:  # every operation is tried; all failures are reported
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}"[:2000])
    elapsed = time.monotonic() - started
    assert operations >= 33
    assert not failures, "\n\n".join(failures)
    # Not a run of refusals: every read answered 200 to the seeded token at least once.
    unread = [op for op, seen in statuses.items() if op.startswith("GET") and 200 not in seen]
    assert len(statuses) == operations and not unread, unread
    assert elapsed < 120, f"the run took {elapsed:.0f} s"
