"""/healthz says the process is alive; /readyz says whether it can work, check by check, and
never why a check failed: an anonymous caller learns no host, path or URL."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest


def fetch(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_healthz_answers_ok_and_nothing_else(live_server):
    assert fetch(f"{live_server.url}/healthz") == (200, "text/plain", "ok\n")


def test_readyz_is_ready_when_database_broker_and_data_directory_work(live_server):
    status, kind, body = fetch(f"{live_server.url}/readyz")
    assert (status, kind) == (200, "application/json")
    assert json.loads(body) == {
        "status": "ready",
        "checks": {"database": "ok", "broker": "ok", "data_dir": "ok"},
    }


def test_an_unwritable_data_directory_is_503_naming_the_check_not_the_path(
    live_server, settings, tmp_path
):
    missing = tmp_path / "data-dir-that-is-not-there"
    settings.DATA_DIR = missing
    status, _, body = fetch(f"{live_server.url}/readyz")
    assert status == 503
    assert json.loads(body) == {
        "status": "unavailable",
        "checks": {"database": "ok", "broker": "ok", "data_dir": "failed"},
    }
    assert str(tmp_path) not in body and "data-dir-that-is-not-there" not in body
    assert fetch(f"{live_server.url}/healthz")[0] == 200  # alive all the same


@pytest.mark.parametrize("setting", ["REDIS_URL", "BROKER_DIR"])
def test_an_unreachable_broker_is_503_without_its_address(live_server, settings, tmp_path, setting):
    if setting == "REDIS_URL":
        # A closed port on this host, with a password that must not come back.
        settings.REDIS_URL = "redis://:hunter2-broker-password@127.0.0.1:1/0"
    else:
        settings.REDIS_URL = None
        settings.BROKER_DIR = tmp_path / "no-broker-here"
    status, _, body = fetch(f"{live_server.url}/readyz")
    assert status == 503
    assert json.loads(body)["checks"] == {"database": "ok", "broker": "failed", "data_dir": "ok"}
    for secret in ("hunter2", "127.0.0.1:1", "no-broker-here", str(tmp_path)):
        assert secret not in body
