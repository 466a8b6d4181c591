"""deploy/: the compose file, its proxy and the systemd units describe a runnable layout:
`docker compose config` accepts the file where the compose plugin is installed; everywhere,
its structure is checked, the environment names only documented settings, and each unit starts
a command that exists."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import yaml
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
BIN = Path(sys.executable).parent
EPHYRA = {"migrate", "web", "worker"}
# The settings read with env_secret (ephyra/settings.py): NAME or NAME_FILE.
FILE_SETTINGS = {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "EPHYRA_METRICS_TOKEN"}


def documented_settings() -> set[str]:
    """The names in the first column of README.md's configuration table."""
    names = set()
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1]))
    return names


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def compose_plugin() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    return subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not compose_plugin(), reason="docker compose is not installed here")
def test_docker_compose_accepts_the_file(tmp_path):
    secrets = DEPLOY / "secrets"
    made = not secrets.exists()
    secrets.mkdir(exist_ok=True)
    try:
        for name in ("secret-key", "database-url", "postgres-password", "metrics-token"):
            (secrets / name).touch()
        checked = subprocess.run(
            ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
            capture_output=True,
            text=True,
        )
        assert checked.returncode == 0, checked.stderr
    finally:
        if made:
            shutil.rmtree(secrets)


def test_the_compose_file_has_every_piece_of_the_production_layout():
    spec = compose()
    services = spec["services"]
    assert set(services) == EPHYRA | {"postgres", "redis", "proxy"}
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        for needed in service.get("depends_on", {}):
            assert needed in services, (name, needed)
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), (name, source)
            else:
                assert source in spec["volumes"], (name, source)
        for secret in service.get("secrets", []):
            assert secret in spec["secrets"], (name, secret)
    for name in EPHYRA:
        build = services[name]["build"]
        assert (DEPLOY / build["context"] / build["dockerfile"]).is_file()
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")
    assert "journal-remote" in spec["volumes"]
    assert any(m.startswith("journal-remote:") for m in services["worker"]["volumes"])
    caddyfile = (DEPLOY / "Caddyfile").read_text()
    assert "reverse_proxy web:8000" in caddyfile and "respond /metrics 404" in caddyfile


def test_the_ephyra_services_set_only_documented_settings():
    documented = documented_settings()
    assert {"DATABASE_URL", "EPHYRA_METRICS_TOKEN", "EPHYRA_LOG_FORMAT"} <= documented
    for name in EPHYRA:
        for key in compose()["services"][name]["environment"]:
            base = key.removesuffix("_FILE")
            if key != base:
                assert base in FILE_SETTINGS, key
            assert base in documented, f"{name} sets {key}, which README.md does not document"


def test_the_ephyra_services_run_commands_that_exist():
    services = compose()["services"]
    commands = get_commands()
    for name in ("migrate", "worker"):
        program, script, command, *_ = services[name]["command"]
        assert (program, script) == ("python", "manage.py") and command in commands
    web = services["web"]["command"]
    assert web[0] == "gunicorn" and find_spec(web[1]) is not None
    assert (BIN / "gunicorn").exists()
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "--require-hashes -r requirements/runtime.txt" in dockerfile
    assert (ROOT / "requirements" / "runtime.txt").is_file()


@pytest.mark.parametrize("unit", ["ephyra-web.service", "ephyra-worker.service"])
def test_each_systemd_unit_parses_and_starts_an_existing_command(unit):
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read(DEPLOY / "systemd" / unit)
    assert parser.sections() == ["Unit", "Service", "Install"]
    service = parser["Service"]
    assert service["User"] == "ephyra" and service["Restart"] == "on-failure"
    assert service["EnvironmentFile"] == "/etc/ephyra/ephyra.env"
    assert parser["Install"]["WantedBy"] == "multi-user.target"
    argv = shlex.split(service["ExecStart"])
    installed = service["WorkingDirectory"]
    assert argv[0].startswith(f"{installed}/.venv/bin/")
    # The clone this test runs in stands for /opt/ephyra.
    program = ROOT / argv[0].removeprefix(f"{installed}/")
    assert program.exists(), argv[0]
    if argv[1] == "manage.py":
        assert (ROOT / "manage.py").is_file() and argv[2] in get_commands()
    else:
        assert find_spec(argv[1]) is not None
    assert f"deploy/systemd/{unit}" in (ROOT / "docs" / "deploy.md").read_text()
