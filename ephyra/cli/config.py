"""Where the command line finds its server: the environment first, then the file `login` wrote.

The file holds a token, so it is written readable by its owner alone (0600) in a folder only
the owner may list (0700), and rewritten whole: a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


class ConfigError(Exception):
    """The configuration cannot be used; the message says what to do."""


@dataclass(frozen=True)
class Config:
    url: str = ""
    token: str = ""
    workspace: str = ""


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ephyra" / "config.json"


def read_file(path: Path | None = None) -> Config:
    path = path or config_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Config()
    except (OSError, ValueError) as exc:
        problem = f"{path}: cannot read the configuration ({exc}); run `ephyra login`"
        raise ConfigError(problem) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object; run `ephyra login`")
    return Config(
        url=str(data.get("url") or ""),
        token=str(data.get("token") or ""),
        workspace=str(data.get("workspace") or ""),
    )


def load(workspace: str = "") -> Config:
    """The settings in force: ``EPHYRA_URL``, ``EPHYRA_TOKEN`` and ``EPHYRA_WORKSPACE`` win over
    the file, each on its own; a ``--workspace`` given on the command line wins over both."""
    saved = read_file()
    return Config(
        url=normal_url(os.environ.get("EPHYRA_URL") or saved.url),
        token=os.environ.get("EPHYRA_TOKEN") or saved.token,
        workspace=workspace or os.environ.get("EPHYRA_WORKSPACE") or saved.workspace,
    )


def normal_url(url: str) -> str:
    return url.strip().rstrip("/")


def write_file(config: Config, path: Path | None = None) -> Path:
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = json.dumps(
        {"url": config.url, "token": config.token, "workspace": config.workspace}, indent=2
    )
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask may not take bits away from a file that existed
        os.write(fd, (text + "\n").encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(partial, path)
    return path


def remove_file(path: Path | None = None) -> Path | None:
    path = path or config_path()
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    return path
