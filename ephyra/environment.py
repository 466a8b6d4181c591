"""Typed readers for the environment: every setting Ephyra takes from outside goes through here.

Each helper raises ``ImproperlyConfigured`` naming the variable, so a typo in a deployment fails
at start-up with a message an operator can act on, not later with a stack trace. Secrets may
also come from ``<NAME>_FILE`` (a path to a file holding the value), the convention container
platforms use for mounted secrets.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str, env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    return env.get(name)


def env_str(name: str, default: str | None = None, *, env: Mapping[str, str] | None = None) -> str:
    value = _raw(name, env)
    if value is None:
        if default is None:
            raise ImproperlyConfigured(f"{name} must be set")
        return default
    return value


def env_secret(name: str, *, env: Mapping[str, str] | None = None) -> str | None:
    """The value of NAME, or the contents of the file NAME_FILE points at, or None."""
    value = _raw(name, env)
    if value:
        return value
    path = _raw(f"{name}_FILE", env)
    if not path:
        return None
    try:
        content = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ImproperlyConfigured(f"{name}_FILE: cannot read {path}: {exc.strerror}") from exc
    if not content:
        raise ImproperlyConfigured(f"{name}_FILE: {path} is empty")
    return content


def env_secret_key(name: str, key_file: Path, *, env: Mapping[str, str] | None = None) -> str:
    """NAME, else the contents of NAME_FILE, else the key kept in ``key_file``, made there once.

    A key is made only when none is given, so a fresh clone runs every command without a step.
    It goes to a private temporary file (mode 0600) that is then hard-linked into place: linking
    never replaces an existing file, so of two processes starting at once the first link wins
    and both read that one key. The key is never printed or logged.
    """
    given = env_secret(name, env=env)
    if given:
        return given
    if not key_file.exists():
        _make_key_file(name, key_file)
    try:
        key = key_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ImproperlyConfigured(f"{name}: cannot read {key_file}: {exc.strerror}") from exc
    if not key:
        raise ImproperlyConfigured(
            f"{name}: {key_file} is empty; delete it to have a new key made, or set {name}"
        )
    return key


def _make_key_file(name: str, key_file: Path) -> None:
    try:
        fd, temporary = tempfile.mkstemp(dir=key_file.parent, prefix=f".{key_file.name}.")
    except OSError as exc:
        raise ImproperlyConfigured(
            f"{name} is not set and {key_file.parent} is not writable ({exc.strerror}): "
            f"set {name} or {name}_FILE"
        ) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(secrets.token_urlsafe(50) + "\n")
            out.flush()
            os.fsync(out.fileno())
        # Another process was first: its key is the key.
        with contextlib.suppress(FileExistsError):
            os.link(temporary, key_file)
    finally:
        os.unlink(temporary)


def env_bool(name: str, default: bool, *, env: Mapping[str, str] | None = None) -> bool:
    value = _raw(name, env)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false, 1/0, yes/no), got {value!r}")


def env_int(
    name: str, default: int, *, minimum: int | None = None, env: Mapping[str, str] | None = None
) -> int:
    value = _raw(name, env)
    if value is None:
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {number}")
    return number


def env_list(name: str, default: list[str], *, env: Mapping[str, str] | None = None) -> list[str]:
    value = _raw(name, env)
    if value is None:
        return list(default)
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise ImproperlyConfigured(f"{name} must be a comma-separated list without empty items")
    return items


def env_origins(
    name: str, default: list[str], *, env: Mapping[str, str] | None = None
) -> list[str]:
    """Comma-separated origins, each with its scheme: ``https://ephyra.example.com``."""
    origins = env_list(name, default, env=env)
    for origin in origins:
        parts = urlsplit(origin)
        if parts.scheme not in {"http", "https"} or not parts.netloc or parts.path not in {"", "/"}:
            raise ImproperlyConfigured(
                f"{name} must list origins like https://ephyra.example.com, got {origin!r}"
            )
    return origins


# An HTTP header name (RFC 9110 token), as a reverse proxy sends it.
_HEADER = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


def env_proxy_ssl_header(
    name: str, *, env: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """``X-Forwarded-Proto`` (or ``Header=value``): the header by which a reverse proxy says the
    request came over HTTPS (value ``https`` unless given), as Django's SECURE_PROXY_SSL_HEADER
    wants it (``("HTTP_X_FORWARDED_PROTO", "https")``); None when unset."""
    value = _raw(name, env)
    if value is None or not value.strip():
        return None
    header, sep, expected = (part.strip() for part in value.partition("="))
    if not _HEADER.fullmatch(header) or (sep and not expected):
        raise ImproperlyConfigured(
            f"{name} must be a header name like X-Forwarded-Proto (or Header=value), got {value!r}"
        )
    return "HTTP_" + header.upper().replace("-", "_"), expected or "https"


def env_mapping(name: str, *, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``key=value,key2=value2``; an empty value is allowed (it switches a default off)."""
    mapping: dict[str, str] = {}
    for item in env_list(name, [], env=env):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ImproperlyConfigured(f"{name} must look like key=value,key2=value2; got {item!r}")
        mapping[key.strip()] = value.strip()
    return mapping


def env_path(name: str, default: Path, *, env: Mapping[str, str] | None = None) -> Path:
    value = _raw(name, env)
    if value is None:
        return default
    if not value.strip():
        raise ImproperlyConfigured(f"{name} must be a path, got an empty value")
    return Path(value).expanduser().resolve()


# BEGIN IMMEDIATE: a transaction takes SQLite's write lock when it starts and waits for it (up to
# the timeout). A deferred one that reads first and writes later cannot upgrade its lock while
# another process writes, and fails at once with "database is locked" instead of waiting.
SQLITE_OPTIONS = {"timeout": 20, "transaction_mode": "IMMEDIATE"}


_ENGINES = {
    "postgres": "django.db.backends.postgresql",
    "postgresql": "django.db.backends.postgresql",
    "pgsql": "django.db.backends.postgresql",
    "sqlite": "django.db.backends.sqlite3",
}


def parse_database_url(name: str, url: str) -> dict:
    """Turn ``postgres://user:pass@host:port/db?opt=v`` or ``sqlite:///path`` into DATABASES."""
    parts = urlsplit(url)
    engine = _ENGINES.get(parts.scheme)
    if engine is None:
        raise ImproperlyConfigured(
            f"{name} has an unsupported scheme {parts.scheme!r}: use postgres:// or sqlite:///"
        )
    if engine.endswith("sqlite3"):
        # As in dj-database-url: sqlite:////abs/path is absolute, sqlite:///name is relative.
        path = unquote(parts.path)[1:]
        if parts.netloc or not path:
            raise ImproperlyConfigured(f"{name} must look like sqlite:////absolute/path.sqlite3")
        return {"ENGINE": engine, "NAME": path, "OPTIONS": SQLITE_OPTIONS.copy()}
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ImproperlyConfigured(f"{name} must name a database: postgres://host:5432/NAME")
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{name} has an invalid port") from None
    return {
        "ENGINE": engine,
        "NAME": database,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(port or ""),
        "OPTIONS": dict(parse_qsl(parts.query)),
        "CONN_MAX_AGE": 60,
    }


def env_database(name: str, default_sqlite: Path, *, env: Mapping[str, str] | None = None) -> dict:
    url = env_secret(name, env=env)
    if not url:
        return {
            "ENGINE": _ENGINES["sqlite"],
            "NAME": str(default_sqlite),
            "OPTIONS": SQLITE_OPTIONS.copy(),
        }
    return parse_database_url(name, url)


def env_broker(name: str, *, env: Mapping[str, str] | None = None) -> str | None:
    """A Redis URL, validated, or None when the embedded broker should be used."""
    url = env_secret(name, env=env)
    if not url:
        return None
    scheme = urlsplit(url).scheme
    if scheme not in {"redis", "rediss"}:
        raise ImproperlyConfigured(f"{name} must be a redis:// or rediss:// URL, got {scheme!r}")
    return url


def filesystem_broker(broker_dir: Path) -> dict:
    """kombu's filesystem transport options with every folder under ``broker_dir`` (created):
    left to itself kombu puts its control folder in the working directory."""
    folders = {name: broker_dir / name for name in ("queue", "processed", "control")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(folders["queue"]),
        "data_folder_out": str(folders["queue"]),
        "processed_folder": str(folders["processed"]),
        "control_folder": str(folders["control"]),
        "store_processed": False,
    }
