"""Settings come from the environment through typed helpers; a bad value names its variable."""

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from ephyra.environment import (
    env_bool,
    env_broker,
    env_database,
    env_int,
    env_list,
    env_secret,
)

ROOT = Path(__file__).resolve().parents[2]


def test_no_database_url_means_sqlite_in_the_data_directory(tmp_path):
    db = env_database("DATABASE_URL", tmp_path / "ephyra.sqlite3", env={})
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == str(tmp_path / "ephyra.sqlite3")


def test_a_postgres_url_is_split_into_its_parts(tmp_path):
    db = env_database(
        "DATABASE_URL",
        tmp_path / "x",
        env={"DATABASE_URL": "postgres://ephyra:s%40cret@db.internal:6432/quests?sslmode=require"},
    )
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"], db["NAME"]) == (
        "ephyra",
        "s@cret",
        "db.internal",
        "6432",
        "quests",
    )
    assert db["OPTIONS"] == {"sslmode": "require"}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://root@localhost/db", "DATABASE_URL has an unsupported scheme 'mysql'"),
        ("postgres://localhost:5432/", "DATABASE_URL must name a database"),
        ("postgres://localhost:99999/db", "DATABASE_URL has an invalid port"),
        ("sqlite://", "DATABASE_URL must look like sqlite:////absolute/path.sqlite3"),
    ],
)
def test_a_bad_database_url_names_the_variable(tmp_path, url, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        env_database("DATABASE_URL", tmp_path / "x", env={"DATABASE_URL": url})


def test_the_database_url_may_come_from_a_file(tmp_path):
    secret = tmp_path / "db-url"
    secret.write_text("postgres://u:p@h:5432/d\n")
    db = env_database("DATABASE_URL", tmp_path / "x", env={"DATABASE_URL_FILE": str(secret)})
    assert db["NAME"] == "d" and db["PASSWORD"] == "p"


def test_an_unreadable_secret_file_names_the_variable(tmp_path):
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY_FILE: cannot read"):
        env_secret("SECRET_KEY", env={"SECRET_KEY_FILE": str(tmp_path / "missing")})


def test_redis_is_optional_and_validated():
    assert env_broker("REDIS_URL", env={}) is None
    assert env_broker("REDIS_URL", env={"REDIS_URL": "redis://127.0.0.1:6379/0"}) == (
        "redis://127.0.0.1:6379/0"
    )
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL must be a redis:// or rediss:// URL"):
        env_broker("REDIS_URL", env={"REDIS_URL": "amqp://guest@localhost//"})


@pytest.mark.parametrize(
    ("helper", "value", "message"),
    [
        (lambda env: env_bool("DEBUG", False, env=env), "maybe", "DEBUG must be a boolean"),
        (lambda env: env_int("DEBUG", 1, env=env), "ten", "DEBUG must be an integer"),
        (lambda env: env_int("DEBUG", 1, minimum=1, env=env), "0", "DEBUG must be at least 1"),
        (lambda env: env_list("DEBUG", [], env=env), "a,,b", "DEBUG must be a comma-separated"),
    ],
)
def test_typed_helpers_refuse_bad_values_by_name(helper, value, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        helper({"DEBUG": value})


def _settings_in_subprocess(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import ephyra.settings as s; print(s.DATABASES['default']['ENGINE'])",
        ],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_production_settings_refuse_to_start_without_a_secret_key():
    result = _settings_in_subprocess({})
    assert result.returncode != 0
    assert "SECRET_KEY must be set (or SECRET_KEY_FILE) unless DEBUG=true" in result.stderr


def test_debug_settings_start_with_nothing_configured(tmp_path):
    result = _settings_in_subprocess({"DEBUG": "true", "EPHYRA_DATA_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "django.db.backends.sqlite3"


def test_a_bad_debug_value_stops_settings_with_its_name():
    result = _settings_in_subprocess({"DEBUG": "perhaps"})
    assert "DEBUG must be a boolean (true/false, 1/0, yes/no), got 'perhaps'" in result.stderr


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:////var/lib/ephyra/db.sqlite3", "/var/lib/ephyra/db.sqlite3"),
        ("sqlite:///ephyra.sqlite3", "ephyra.sqlite3"),
    ],
)
def test_sqlite_urls_follow_the_usual_slash_convention(tmp_path, url, path):
    assert env_database("DATABASE_URL", tmp_path, env={"DATABASE_URL": url})["NAME"] == path
