"""Backup and restore: the database, every workspace's journals and audit anchors, and a
manifest that vouches for both.

A backup directory holds:

- ``database.pgdump`` (``pg_dump --format=custom``, one snapshot) on PostgreSQL, or
  ``database.sqlite3`` (SQLite's online backup API, a consistent copy while others write);
- ``journals/<workspace>.bundle``: a ``git bundle`` of the workspace's ``refs/ephyra/*``
  (quests, missions, audit anchors), readable with plain git (``git bundle list-heads``);
- ``manifest.json``: the SHA-256 of each file, the versions that wrote it (Ephyra, Django,
  git, the database and its last migration of each app), and each workspace's journal heads.

Order makes it consistent while workers run: the audit anchors are read first, then the
database is dumped, then the journals are bundled. Journals only grow and the database is
written after Git, so the bundled journals hold at least every transition the dump shows
(repair brings the database up to anything more); the anchors are restored as they were before
the dump, so no anchor vouches for an audit entry the dump lacks.

Restore verifies every digest before it changes anything, refuses a database or mirror that is
not empty, loads the database, unbundles the journals into fresh mirrors, sets the anchors, and
migrates the schema up to this version of Ephyra.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import django
from django.conf import settings
from django.core.management import call_command
from django.db import connection, connections
from django.db.migrations.loader import MigrationLoader

from journal.anchor import AUDIT_REF_PREFIX
from journal.store import Journal
from quests.models import Workspace

FORMAT = 1
MANIFEST = "manifest.json"
JOURNAL_REFS = "refs/ephyra/"


class BackupError(Exception):
    """A backup or restore refused or failed; the message says which file or what to do."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run(command: list[str], *, env: dict[str, str] | None = None, what: str) -> str:
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, check=False, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise BackupError(f"{what} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _pg_env() -> dict[str, str]:
    """libpq's variables for the default database: the password goes in the environment, never
    on a command line another user could read."""
    db = connection.settings_dict
    env = {**os.environ, "PGDATABASE": db["NAME"]}
    for key, name in (("HOST", "PGHOST"), ("PORT", "PGPORT"), ("USER", "PGUSER")):
        if db.get(key):
            env[name] = str(db[key])
    if db.get("PASSWORD"):
        env["PGPASSWORD"] = db["PASSWORD"]
    return env


def _journal_refs(mirror: Path, prefix: str = JOURNAL_REFS) -> dict[str, str]:
    out = _run(
        ["git", "--git-dir", str(mirror), "for-each-ref", "--format=%(refname) %(objectname)",
         prefix],
        what=f"reading the journals of {mirror}",
    )  # fmt: skip
    return dict(line.split(" ", 1) for line in out.splitlines() if line)


def _versions() -> dict[str, str]:
    try:
        ephyra = metadata.version("ephyra")
    except metadata.PackageNotFoundError:
        ephyra = "unknown"
    git = _run(["git", "--version"], what="git --version").strip()
    return {"ephyra": ephyra, "django": django.get_version(), "git": git}


def _applied_migrations() -> list[list[str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT app, name FROM django_migrations ORDER BY app, name")
        return [list(row) for row in cursor.fetchall()]


@dataclass
class BackupReport:
    directory: Path
    files: dict[str, str]
    workspaces: list[str]

    def summary(self) -> str:
        return (
            f"backup in {self.directory}: the database, {len(self.workspaces)} workspaces' "
            f"journals, {len(self.files)} files with their SHA-256 in {MANIFEST}"
        )


def backup(directory: Path) -> BackupReport:
    """Write a backup into ``directory`` (new or empty)."""
    directory = directory.resolve()
    if directory.exists() and any(directory.iterdir()):
        raise BackupError(f"{directory} is not empty: a backup goes into a new directory")
    (directory / "journals").mkdir(parents=True, exist_ok=True)
    workspaces = list(Workspace.objects.order_by("slug"))
    # 1. The anchors before the dump: none may vouch for an entry the dump lacks.
    anchors = {
        ws.slug: _journal_refs(Path(ws.repository), AUDIT_REF_PREFIX)
        for ws in workspaces
        if Path(ws.repository).exists()
    }
    # 2. The database, one consistent snapshot.
    vendor = connection.vendor
    if vendor == "postgresql":
        database = "database.pgdump"
        _run(
            ["pg_dump", "--format=custom", "--no-owner", "--no-privileges",
             "--file", str(directory / database)],
            env=_pg_env(),
            what="pg_dump",
        )  # fmt: skip
        server = _run(["pg_dump", "--version"], what="pg_dump --version").strip()
    elif vendor == "sqlite":
        database = "database.sqlite3"
        source = sqlite3.connect(connection.settings_dict["NAME"])
        target = sqlite3.connect(directory / database)
        try:
            with target:
                source.backup(target)
        finally:
            target.close()
            source.close()
        server = f"sqlite {sqlite3.sqlite_version}"
    else:
        raise BackupError(f"no backup for a {vendor} database")
    migrations = _applied_migrations()
    # 3. The journals, after the dump: they hold at least what it shows.
    listed = []
    for ws in workspaces:
        mirror = Path(ws.repository)
        heads = _journal_refs(mirror) if mirror.exists() else {}
        entry = {"slug": ws.slug, "refs": len(heads), "anchors": anchors.get(ws.slug, {})}
        if heads:
            bundle = f"journals/{ws.slug}.bundle"
            _run(
                ["git", "--git-dir", str(mirror), "bundle", "create", "--quiet",
                 str(directory / bundle), f"--glob={JOURNAL_REFS}*"],
                what=f"git bundle of {ws.slug}",
            )  # fmt: skip
            entry["bundle"] = bundle
        listed.append(entry)
    files = {
        str(path.relative_to(directory)): _sha256(path)
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }
    manifest = {
        "format": FORMAT,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": {**_versions(), "database": server},
        "database": {"vendor": vendor, "file": database, "migrations": migrations},
        "workspaces": listed,
        "files": files,
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return BackupReport(directory, files, [ws.slug for ws in workspaces])


# --- restore --------------------------------------------------------------------------------


def read_manifest(directory: Path) -> dict:
    """The manifest, after checking that every file it lists is there with its digest."""
    path = directory / MANIFEST
    if not path.is_file():
        raise BackupError(f"{directory} has no {MANIFEST}: it is not a backup")
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise BackupError(f"{MANIFEST} cannot be read: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{MANIFEST}: format {manifest.get('format')!r}, expected {FORMAT}")
    for name, digest in manifest["files"].items():
        file = (directory / name).resolve()
        if not file.is_relative_to(directory.resolve()):
            raise BackupError(f"{MANIFEST} names {name}, outside the backup")
        if not file.is_file():
            raise BackupError(f"{name} is missing from the backup")
        if _sha256(file) != digest:
            raise BackupError(
                f"{name} does not match its SHA-256 in {MANIFEST}: the backup is damaged; "
                "nothing was restored"
            )
    return manifest


def _unknown_migrations(manifest: dict) -> list[str]:
    """Migrations the backup's database has and this code does not: a newer Ephyra wrote it."""
    known = set(MigrationLoader(None, ignore_no_migrations=True).disk_migrations)
    return [f"{app}.{name}" for app, name in manifest["database"]["migrations"]
            if (app, name) not in known]  # fmt: skip


def _database_tables() -> list[str]:
    return connection.introspection.table_names()


def _check_empty(manifest: dict) -> None:
    vendor = manifest["database"]["vendor"]
    if vendor != connection.vendor:
        raise BackupError(
            f"the backup holds a {vendor} database; this install uses {connection.vendor}"
        )
    tables = _database_tables()
    if tables:
        raise BackupError(
            f"the database {connection.settings_dict['NAME']} is not empty ({len(tables)} "
            "tables): restore goes onto an empty install (a new database, a new data directory)"
        )
    taken = [str(p) for p in _mirror_paths(manifest).values() if p.exists() and any(p.iterdir())]
    if taken:
        raise BackupError(f"a mirror is already there: {', '.join(taken)}; restore needs a new "
                          "data directory")  # fmt: skip
    unknown = _unknown_migrations(manifest)
    if unknown:
        raise BackupError(
            f"the backup was written by a newer Ephyra (migrations {', '.join(unknown[:5])}); "
            "restore it with that version or later"
        )


def _mirror_paths(manifest: dict) -> dict[str, Path]:
    """Where each workspace's mirror goes on this install: under the data directory."""
    root = Path(settings.DATA_DIR) / "mirrors"
    return {entry["slug"]: root / f"{entry['slug']}.git" for entry in manifest["workspaces"]}


@dataclass
class RestoreReport:
    workspaces: list[str]
    refs: int

    def summary(self) -> str:
        return (
            f"restored the database and {len(self.workspaces)} workspaces' journals ({self.refs} "
            "refs); check them: manage.py audit verify, then manage.py repair"
        )


def restore(directory: Path) -> RestoreReport:
    """Restore the backup in ``directory`` onto this empty install."""
    directory = directory.resolve()
    manifest = read_manifest(directory)  # every digest, before anything changes
    _check_empty(manifest)
    database = directory / manifest["database"]["file"]
    if connection.vendor == "postgresql":
        _run(
            ["pg_restore", "--no-owner", "--no-privileges", "--exit-on-error",
             "--dbname", connection.settings_dict["NAME"], str(database)],
            env=_pg_env(),
            what="pg_restore",
        )  # fmt: skip
    else:
        name = connection.settings_dict["NAME"]
        connections.close_all()
        source = sqlite3.connect(database)
        target = sqlite3.connect(name)
        try:
            with target:
                source.backup(target)
        finally:
            target.close()
            source.close()
    mirrors = _mirror_paths(manifest)
    refs = 0
    for entry in manifest["workspaces"]:
        mirror = mirrors[entry["slug"]]
        Journal.init(mirror, bare=True)
        if entry.get("bundle"):
            _run(
                ["git", "--git-dir", str(mirror), "fetch", "--quiet", "--no-tags",
                 str(directory / entry["bundle"]), f"{JOURNAL_REFS}*:{JOURNAL_REFS}*"],
                what=f"unbundling the journals of {entry['slug']}",
            )  # fmt: skip
        for ref, head in entry["anchors"].items():  # as they were before the dump
            _run(["git", "--git-dir", str(mirror), "update-ref", ref, head],
                 what=f"setting the audit anchor {ref}")  # fmt: skip
        refs += len(_journal_refs(mirror))
    call_command("migrate", verbosity=0)  # a backup of an older version: bring the schema up
    # This install's mirrors are under its data directory, whatever the old host's paths.
    for slug, mirror in mirrors.items():
        Workspace.objects.filter(slug=slug).update(repository=str(mirror))
    return RestoreReport(list(mirrors), refs)
