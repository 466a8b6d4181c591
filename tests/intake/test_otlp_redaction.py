"""No secret an export carries reaches the database, the journal or a log line.

One log export (protobuf) and one trace export (OTLP JSON), each seeded with an example of every
redaction rule (``ephyra/redaction/rules.py``: the rule's own positive example, so a new rule is
seeded here the day it is written) in every text field a signal is read from, are sent over real
HTTP to a live server; then the workspace's worker applies the quest events (journal commits,
triage effects). Afterwards every column of every row of every table, every object of the
journal repository (``git cat-file --batch-all-objects``) and every captured log line are
searched for each secret.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import urllib.error
import urllib.request

import pytest
from django.db import connection
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from ephyra.redaction.rules import RULES
from intake.otlp.models import IngestedSignal
from intake.otlp.tokens import token_create
from ledger.models import InboundEvent
from quests.models import Quest
from tests.telemetry import hidden
from worker.loop import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("committed")]

KEYED_SECRET = "correct horse battery staple"  # no pattern finds it; only its key name does


def seeded(rule) -> tuple[str, str]:
    """The rule's first positive example with one placeholder: (the text, the secret in it)."""
    for text, expected in rule.positives:
        if expected.count(rule.placeholder) == 1:
            before, after = expected.split(rule.placeholder)
            return text, text[len(before) : len(text) - len(after)]
    raise AssertionError(f"rule {rule.name} has no positive example with one placeholder")


SEEDS = {rule.name: seeded(rule) for rule in RULES}


def needles() -> dict[str, str]:
    """What must not be found, by rule: each secret, and its parts that are secret on their
    own (a PEM block's lines, the password of ``user:password``)."""
    found = {"key-name": KEYED_SECRET}
    for name, (_, secret) in SEEDS.items():
        found[name] = secret
        parts = re.split(r"[\n:]", secret)
        for n, part in enumerate(parts):
            if part != secret and len(part) >= 6 and "-----" not in part:
                found[f"{name} part {n}"] = part
    return found


SECRET_LINES = "\n".join(text for text, _ in SEEDS.values())
TRACE = f"""Traceback (most recent call last):
  File "/srv/app/shop/payments.py", line 88, in charge
    gateway.charge(card, token)
  File "/srv/app/shop/gateway.py", line 17, in charge
    raise PaymentError(reply)
shop.gateway.PaymentError: gateway refused the request
{SECRET_LINES}"""


def attr(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def secret_attributes() -> dict[str, str]:
    return {
        "exception.type": "shop.gateway.PaymentError",
        "exception.message": f"gateway refused the request\n{SECRET_LINES}",
        "exception.stacktrace": TRACE,
        "checkout.note": SECRET_LINES,
        "db.password": KEYED_SECRET,
        "http.request.header.authorization": SEEDS["bearer-token"][0],
    }


def log_export() -> bytes:
    record = LogRecord(
        time_unix_nano=1_767_600_000_000_000_000,
        severity_number=17,
        severity_text="ERROR",
        body=AnyValue(string_value=f"payment failed\n{SECRET_LINES}"),
        attributes=[attr(k, v) for k, v in secret_attributes().items()],
    )
    resource = Resource(
        attributes=[
            attr("service.name", "payments"),
            attr("deployment.note", SECRET_LINES),
            attr("cloud.api_key", KEYED_SECRET),
        ]
    )
    request = ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                resource=resource,
                scope_logs=[ScopeLogs(log_records=[record])],
            )
        ]
    )
    return request.SerializeToString()


def trace_export() -> bytes:
    def attrs(mapping: dict[str, str]) -> list[dict]:
        return [{"key": k, "value": {"stringValue": v}} for k, v in mapping.items()]

    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "POST /checkout",
        "kind": 2,
        "startTimeUnixNano": "1767600000000000000",
        "endTimeUnixNano": "1767600000500000000",
        "attributes": attrs({"url.full": SEEDS["url-credentials"][0], "user.note": SECRET_LINES}),
        "events": [
            {
                "name": "exception",
                "timeUnixNano": "1767600000400000000",
                "attributes": attrs(secret_attributes()),
            }
        ],
        "status": {"code": 2, "message": SECRET_LINES},
    }
    resource = {"attributes": attrs({"service.name": "payments", "deployment.note": SECRET_LINES})}
    body = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
    return json.dumps(body).encode()


def post(url: str, body: bytes, content_type: str, token: str) -> int:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": content_type, "Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status


def _text(value) -> str:
    if isinstance(value, memoryview):
        value = value.tobytes()
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else str(value)


def database_values() -> list[tuple[str, str]]:
    """(table, value) for every column of every row of every table."""
    values = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            values += [(table, _text(v)) for row in cursor.fetchall() for v in row]
    return values


def journal_objects(repository: str) -> bytes:
    """The content of every object in the repository, loose or packed, reachable or not."""
    return subprocess.run(
        ["git", "-C", repository, "cat-file", "--batch-all-objects", "--batch"],
        check=True,
        capture_output=True,
    ).stdout


def test_every_kind_of_secret_is_redacted_before_the_database_the_journal_and_the_logs(
    live_server, workspace, caplog
):
    caplog.set_level(logging.DEBUG)
    _, token = token_create(workspace, name="payments")
    assert post(f"{live_server.url}/v1/logs", log_export(), "application/x-protobuf", token) == 200
    assert post(f"{live_server.url}/v1/traces", trace_export(), "application/json", token) == 200
    # A refused export is logged; what it carried must not be.
    broken = b'{"resourceLogs": [{"note": "' + SECRET_LINES.encode() + b'"'
    with pytest.raises(urllib.error.HTTPError) as refused:
        post(f"{live_server.url}/v1/logs", broken, "application/json", token)
    assert refused.value.code == 400
    refused.value.close()
    worker = Worker(owner="redaction-test", workspaces=[workspace.slug])
    worker.step()
    worker.release()

    # The path was walked end to end: signals stored, events applied, the journal written.
    signals = list(IngestedSignal.objects.order_by("pk"))
    assert [s.source for s in signals] == ["log", "span_event"]
    assert signals[0].quest_id == signals[1].quest_id
    assert set(InboundEvent.objects.values_list("state", flat=True)) == {"applied"}
    assert Quest.objects.get(quest_id=signals[0].quest_id).state == "triaged"
    # Each rule left its placeholder in the stored message: the secrets were there, and went.
    for name in SEEDS:
        assert f"[redacted:{name}]" in signals[0].message, name

    rows = database_values()
    objects = journal_objects(workspace.repository)
    # The scans read what was written: the error's own words are in both, redacted.
    assert any("gateway refused the request" in value for _, value in rows)
    assert b"signal_sensed" in objects and b"PaymentError: gateway refused the request" in objects
    logs = caplog.text
    assert "OTLP export refused (400)" in logs  # the capture saw the server's logging
    leaks = []
    for name, needle in needles().items():
        leaks += [f"{name} in table {t}" for t, value in rows if needle in value]
        if needle.encode() in objects:
            leaks.append(f"{name} in the journal")
        if needle in logs:
            leaks.append(f"{name} in the logs")
    assert not leaks, leaks


def test_secrets_hidden_by_invisible_characters_or_unencoded_delimiters_are_not_stored(
    client, workspace
):
    # issue 13, defect 16: each carried in a log's body, message, stack trace and an attribute
    _, token = token_create(workspace, name="payments")
    texts = "\n".join(hidden.carriers().values())
    record = LogRecord(
        time_unix_nano=1_767_600_000_000_000_000,
        severity_number=17,
        body=AnyValue(string_value=f"payment failed\n{texts}"),
        attributes=[
            attr("exception.type", "shop.gateway.PaymentError"),
            attr("exception.message", f"gateway refused the request\n{texts}"),
            attr("exception.stacktrace", TRACE.replace(SECRET_LINES, texts)),
            attr("checkout.note", texts),
        ],
    )
    request = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[record])])]
    )
    response = client.post(
        "/v1/logs",
        data=request.SerializeToString(),
        content_type="application/x-protobuf",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 200, response.content

    signal = IngestedSignal.objects.get()
    for placeholder in hidden.PLACEHOLDERS:  # the secrets were there, and went
        assert placeholder in signal.message
    assert InboundEvent.objects.count() == 1
    assert hidden.leaks(database_values()) == []
