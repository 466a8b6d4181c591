"""Settings come from the environment through typed helpers; a bad value names its variable."""

import hashlib
import stat
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
    env_origins,
    env_proxy_ssl_header,
    env_secret,
    env_secret_key,
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
        (
            lambda env: env_origins("DEBUG", [], env=env),
            "ephyra.example.com",
            "DEBUG must list origins like https://ephyra.example.com, got 'ephyra.example.com'",
        ),
        (
            lambda env: env_origins("DEBUG", [], env=env),
            "https://ephyra.example.com/admin/",
            "DEBUG must list origins like https://",
        ),
        (
            lambda env: env_proxy_ssl_header("DEBUG", env=env),
            "X Forwarded Proto",
            "DEBUG must be a header name like X-Forwarded-Proto",
        ),
    ],
)
def test_typed_helpers_refuse_bad_values_by_name(helper, value, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        helper({"DEBUG": value})


def test_a_proxy_header_name_becomes_the_meta_key_django_reads():
    assert env_proxy_ssl_header("H", env={"H": "X-Forwarded-Proto"}) == (
        "HTTP_X_FORWARDED_PROTO",
        "https",
    )
    assert env_proxy_ssl_header("H", env={"H": "X-Forwarded-Ssl=on"}) == (
        "HTTP_X_FORWARDED_SSL",
        "on",
    )
    assert env_proxy_ssl_header("H", env={}) is None


def _settings_in_subprocess(env: dict) -> subprocess.Popen:
    """A process that loads the settings and prints a digest of the key, never the key."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import hashlib, ephyra.settings as s; "
            "print(hashlib.sha256(s.SECRET_KEY.encode()).hexdigest())",
        ],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _digest(env: dict) -> str:
    process = _settings_in_subprocess(env)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return out.strip()


def test_without_a_secret_key_one_is_made_once_in_the_data_directory(tmp_path):
    first = _digest({"EPHYRA_DATA_DIR": str(tmp_path)})
    key_file = tmp_path / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    assert len(key) >= 50
    assert first == hashlib.sha256(key.encode()).hexdigest()
    assert _digest({"EPHYRA_DATA_DIR": str(tmp_path)}) == first  # kept, not made again
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".secret_key")] == []


def test_processes_starting_at_once_agree_on_the_key_they_make(tmp_path):
    processes = [_settings_in_subprocess({"EPHYRA_DATA_DIR": str(tmp_path)}) for _ in range(6)]
    finished = [(process, *process.communicate(timeout=60)) for process in processes]
    assert [(p.returncode, err) for p, _, err in finished] == [(0, "")] * len(processes)
    digests = {out.strip() for _, out, _ in finished}
    key = (tmp_path / "secret_key").read_text().strip()
    assert digests == {hashlib.sha256(key.encode()).hexdigest()}


def test_a_given_secret_key_is_used_and_none_is_made(tmp_path):
    given = "a-production-key-" + "x" * 40
    digest = _digest({"EPHYRA_DATA_DIR": str(tmp_path), "SECRET_KEY": given})
    assert digest == hashlib.sha256(given.encode()).hexdigest()
    assert not (tmp_path / "secret_key").exists()


def test_secret_key_wins_over_secret_key_file_which_wins_over_the_made_one(tmp_path):
    key_file = tmp_path / "secret_key"
    key_file.write_text("the-made-one\n")
    mounted = tmp_path / "mounted"
    mounted.write_text("the-mounted-one\n")
    both = {"SECRET_KEY": "the-variable", "SECRET_KEY_FILE": str(mounted)}
    assert env_secret_key("SECRET_KEY", key_file, env=both) == "the-variable"
    only_file = {"SECRET_KEY_FILE": str(mounted)}
    assert env_secret_key("SECRET_KEY", key_file, env=only_file) == "the-mounted-one"
    assert env_secret_key("SECRET_KEY", key_file, env={}) == "the-made-one"


def test_an_emptied_key_file_is_refused_with_what_to_do(tmp_path):
    key_file = tmp_path / "secret_key"
    key_file.write_text("")
    with pytest.raises(ImproperlyConfigured, match="is empty; delete it to have a new key made"):
        env_secret_key("SECRET_KEY", key_file, env={})


def test_debug_settings_start_with_nothing_configured(tmp_path):
    assert _digest({"DEBUG": "true", "EPHYRA_DATA_DIR": str(tmp_path)})
