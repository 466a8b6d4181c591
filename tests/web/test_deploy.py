"""Production settings, as docs/deploy.md gives them: a clean deployment check, static files
served by the application itself, and gunicorn started as the page writes it."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.test import override_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "docs" / "deploy.md"
BIN = Path(sys.executable).parent


def documented_environment(tmp_path: Path) -> dict[str, str]:
    """The ```dotenv block of docs/deploy.md, with its files made under tmp_path: the key and a
    database URL (SQLite here: nothing below needs PostgreSQL's tables)."""
    block = re.search(r"```dotenv\n(.*?)```", DEPLOY.read_text(), re.S).group(1)
    documented = dict(line.split("=", 1) for line in block.splitlines() if line.strip())
    etc, data = tmp_path / "etc", tmp_path / "data"
    etc.mkdir()
    (etc / "secret-key").write_text(secrets.token_urlsafe(50) + "\n")
    (etc / "database-url").write_text(f"sqlite:///{tmp_path}/ephyra.sqlite3\n")
    paths = {"/etc/ephyra": str(etc), "/var/lib/ephyra": str(data)}
    env = {}
    for name, value in documented.items():
        for documented_path, here in paths.items():
            value = value.replace(documented_path, here)
        env[name] = value
    return env


def clean_environment() -> dict[str, str]:
    """This process's environment without the test run's own settings."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in {"DJANGO_SETTINGS_MODULE", "SECRET_KEY", "DEBUG", "EPHYRA_DOORBELL"}
        and not k.startswith(("DATABASE_URL", "REDIS_URL", "EPHYRA_"))
    }


def test_the_deployment_check_is_clean_under_the_documented_variables(tmp_path):
    checked = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=clean_environment() | documented_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr
    assert "System check identified no issues" in checked.stdout
    assert checked.stderr == ""


@pytest.mark.django_db
def test_the_admin_css_is_served_with_debug_off(client, settings):
    assert settings.DEBUG is False
    response = client.get("/static/admin/css/base.css")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/css")
    assert b"".join(response.streaming_content).startswith(b"/*")


@pytest.mark.django_db
@override_settings(SECURE_SSL_REDIRECT=True)
def test_the_health_check_is_answered_over_plain_http_when_https_is_required(client):
    assert client.get("/healthz").status_code == 200
    assert client.get("/admin/login/").status_code == 301


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, dict(refused.headers), refused.read()


def test_gunicorn_started_as_documented_serves_the_admin_css_behind_a_proxy(tmp_path):
    command = re.search(r"^\.venv/bin/(gunicorn .*)$", DEPLOY.read_text(), re.M).group(1)
    port = free_port()
    argv = shlex.split(command.replace("127.0.0.1:8000", f"127.0.0.1:{port}"))
    argv[0] = str(BIN / "gunicorn")
    web = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=clean_environment() | documented_environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base, host = f"http://127.0.0.1:{port}", {"Host": "ephyra.example.com"}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                health = fetch(f"{base}/healthz", host)
                break
            except OSError:
                assert web.poll() is None, web.stdout.read()
                assert time.monotonic() < deadline, "gunicorn did not come up"
                time.sleep(0.2)
        assert health[0] == 200  # plain HTTP, as a health probe asks

        status, headers, _ = fetch(f"{base}/static/admin/css/base.css", host)
        assert (status, headers["Location"]) == (
            301,
            "https://ephyra.example.com/static/admin/css/base.css",
        )
        proxied = host | {"X-Forwarded-Proto": "https"}
        status, headers, body = fetch(f"{base}/static/admin/css/base.css", proxied)
        assert status == 200 and body.startswith(b"/*")
        assert headers["Strict-Transport-Security"] == (
            "max-age=31536000; includeSubDomains; preload"
        )
        status, headers, _ = fetch(f"{base}/admin/login/", proxied)
        assert status == 200
        assert "Secure" in headers["Set-Cookie"]  # the CSRF cookie
    finally:
        web.terminate()
        out, _ = web.communicate(timeout=30)
    assert "Traceback" not in out, out
