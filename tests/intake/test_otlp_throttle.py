"""Throttling (OTLP/HTTP Throttling): a token over its rate limit (exports) or its record
limit is answered 429 with Retry-After, before its body is read when it can be, and nothing is
stored. The counters live in Django's
cache, so they hold across processes (Redis with REDIS_URL, files under the data directory
otherwise)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import OperationalError, connection

from intake.otlp.models import IngestToken
from intake.otlp.throttle import throttle_wait
from intake.otlp.tokens import token_create
from tests.intake.test_otlp_refusals import JSON, PROTOBUF, counts, error_log, post, status_of
from tests.intake.test_otlp_storm import copies

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def limited(settings):
    """Two exports per token per hour: a test never sees its window close."""
    settings.EPHYRA_OTLP_RATE_LIMIT = 2
    settings.EPHYRA_OTLP_RATE_WINDOW = 3600
    return settings


@pytest.fixture
def token(workspace) -> str:
    return token_create(workspace, name="throttled")[1]


def test_an_export_over_the_limit_is_429_with_retry_after_and_stores_nothing(
    client, token, limited
):
    assert post(client, error_log(), token=token).status_code == 200
    assert post(client, error_log("KeyError: 'qty'"), token=token).status_code == 200
    before = counts()

    response = post(client, error_log("KeyError: 'sku'"), token=token)

    assert response.status_code == 429
    assert response["Content-Type"] == PROTOBUF
    assert 3590 <= int(response["Retry-After"]) <= 3600
    status = status_of(response)
    assert status.code == 8  # RESOURCE_EXHAUSTED
    assert status.message.startswith("over the limit of 2 exports per 3600 s for this token")
    assert counts() == before == (2, 2)


def test_a_throttled_json_sender_gets_a_json_status(client, token, limited):
    limited.EPHYRA_OTLP_RATE_LIMIT = 1
    assert post(client, b"{}", token=token, content_type=JSON).status_code == 200
    response = post(client, b"{}", token=token, content_type=JSON)
    assert response.status_code == 429
    assert response["Content-Type"] == JSON
    answer = json.loads(response.content)
    assert answer["code"] == 8 and answer["message"].startswith("over the limit of 1 export")


def test_the_limit_is_checked_before_the_body_is_read(client, token, limited):
    limited.EPHYRA_OTLP_RATE_LIMIT = 1
    assert post(client, b"", token=token).status_code == 200
    # Malformed (400) and oversized (413) bodies are not even looked at once throttled.
    assert post(client, b"\x0a\xff\xff\xff", token=token).status_code == 429
    assert post(client, b"\0" * (5 * 1024 * 1024), token=token).status_code == 429
    assert counts() == (0, 0)


def test_each_token_has_its_own_count(client, workspace, token, limited):
    limited.EPHYRA_OTLP_RATE_LIMIT = 1
    _, other = token_create(workspace, name="other service")
    assert post(client, error_log(), token=token).status_code == 200
    assert post(client, error_log(), token=token).status_code == 429
    assert post(client, error_log("KeyError: 'qty'"), token=other).status_code == 200
    assert counts() == (2, 2)


def test_a_refused_token_is_not_counted(client, token, limited):
    limited.EPHYRA_OTLP_RATE_LIMIT = 1
    for _ in range(3):
        assert post(client, error_log(), token="not-a-token").status_code == 401
    assert post(client, error_log(), token=token).status_code == 200


def test_a_limit_of_zero_turns_throttling_off(client, token, limited):
    limited.EPHYRA_OTLP_RATE_LIMIT = 0
    for n in range(5):
        assert post(client, error_log(f"KeyError: 'k{n}'"), token=token).status_code == 200


def test_retry_after_counts_down_to_the_end_of_the_window(workspace, limited):
    row, _ = token_create(workspace)
    limited.EPHYRA_OTLP_RATE_LIMIT = 1
    limited.EPHYRA_OTLP_RATE_WINDOW = 60
    assert throttle_wait(row, now=1000.0) is None  # opens the window at 1000
    # Asked 20.5 s later, with the window opened at 1000: 39.5 s are left, rounded up.
    assert throttle_wait(row, now=1020.5) == 40
    assert throttle_wait(row, now=1059.9) == 1  # never 0: the exporter must wait a moment


def test_a_cache_that_is_down_lets_exports_through_and_says_so(client, token, limited, caplog):
    limited.EPHYRA_OTLP_RATE_LIMIT = 1
    limited.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:9/0",  # the discard port: nothing answers
            "OPTIONS": {"socket_connect_timeout": 0.5},
        }
    }
    caplog.set_level(logging.WARNING, logger="ephyra.intake.otlp")
    assert post(client, error_log(), token=token).status_code == 200
    assert post(client, error_log("KeyError: 'qty'"), token=token).status_code == 200
    assert "rate limit not applied: the cache is unavailable" in caplog.text
    assert counts() == (2, 2)


def test_the_count_is_shared_with_another_process(workspace, token, limited):
    """What a second web process counted (a real one, on the same settings) counts here."""
    limited.EPHYRA_OTLP_RATE_LIMIT = 3
    row = IngestToken.objects.get()
    script = (
        "import django, sys; django.setup()\n"
        "from django.conf import settings\n"
        "settings.EPHYRA_OTLP_RATE_LIMIT, settings.EPHYRA_OTLP_RATE_WINDOW = 3, 3600\n"
        "from intake.otlp.models import IngestToken\n"
        "from intake.otlp.throttle import throttle_wait\n"
        "token = IngestToken(digest=sys.argv[1])\n"
        "print([throttle_wait(token) for _ in range(3)])\n"
    )
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "tests.settings"}
    other = subprocess.run(
        [sys.executable, "-c", script, row.digest],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert other.stdout.strip() == "[None, None, None]"
    assert throttle_wait(row) is not None  # the fourth request of the window, counted here


@pytest.fixture
def record_limited(settings):
    """Five records per token per hour (exports unlimited): a test never sees the window close."""
    settings.EPHYRA_OTLP_RECORD_LIMIT = 5
    settings.EPHYRA_OTLP_RATE_WINDOW = 3600
    return settings


def test_records_over_the_record_limit_are_429_with_retry_after_and_store_nothing(
    client, token, record_limited
):
    assert post(client, copies(3, at=1), token=token).status_code == 200
    before = counts()

    response = post(client, copies(3, at=2), token=token)  # 6 of 5

    assert response.status_code == 429
    assert 3590 <= int(response["Retry-After"]) <= 3600
    status = status_of(response)
    assert status.code == 8
    assert status.message.startswith("over the limit of 5 records per 3600 s for this token")
    assert counts() == before
    # What was refused used none of the budget: a smaller export still fits.
    assert post(client, copies(2, at=3), token=token).status_code == 200
    # The budget is spent: the next export is refused before its body is read.
    assert post(client, b"\x0a\xff\xff\xff", token=token).status_code == 429


def test_an_export_with_more_records_than_a_whole_window_allows_is_413(
    client, token, record_limited
):
    response = post(client, copies(6), token=token)
    assert response.status_code == 413
    assert status_of(response).message == (
        "an export of 6 records is over the limit of 5 records per 3600 s for this token; "
        "send smaller exports"
    )
    assert counts() == (0, 0)


def test_the_records_of_an_export_the_database_refused_are_given_back(
    client, token, record_limited
):
    def unavailable(execute, sql, params, many, context):
        if "intake_ingestedsignal" in sql.lower():
            raise OperationalError("could not connect to server")
        return execute(sql, params, many, context)

    body = copies(5)
    with connection.execute_wrapper(unavailable):
        assert post(client, body, token=token).status_code == 503
    assert post(client, body, token=token).status_code == 200  # the exporter's retry fits


def test_a_record_limit_of_zero_turns_the_record_budget_off(client, token, record_limited):
    record_limited.EPHYRA_OTLP_RECORD_LIMIT = 0
    assert post(client, copies(50), token=token).status_code == 200
