#!/usr/bin/env python
"""Django's command-line utility for Ephyra."""

import os
import re
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ephyra.settings")
    from django.core.management import execute_from_command_line
    from django.db.utils import OperationalError, ProgrammingError

    try:
        execute_from_command_line(sys.argv)
    except (OperationalError, ProgrammingError) as exc:
        advice = database_advice(str(exc))
        if advice is None:
            raise
        sys.stderr.write(f"{advice}\n")
        sys.exit(1)


def database_advice(error: str) -> str | None:
    """One line instead of a traceback for a newcomer whose database has no tables yet, whose
    PostgreSQL database is missing or whose server is not reachable; None for any other error.
    Never shows the password."""
    from django.conf import settings

    unmigrated = re.match(r'no such table: (\S+)|relation "([^"]+)" does not exist', error)
    if unmigrated:
        return (
            f"The database has no table {unmigrated.group(1) or unmigrated.group(2)} yet: run "
            "`.venv/bin/python manage.py migrate` first (`make run` does)."
        )
    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("postgresql"):
        return None
    host, port = db["HOST"] or "localhost", db["PORT"] or "5432"
    missing = re.search(r'database "([^"]+)" does not exist', error)
    if missing:
        create = f"createdb -h {host} -p {port}" + (f" -U {db['USER']}" if db["USER"] else "")
        return (
            f"The database {missing.group(1)!r} does not exist on the PostgreSQL server at "
            f"{host}:{port} (DATABASE_URL). Create it with: {create} {missing.group(1)}"
        )
    if "Connection refused" in error or "failed to resolve host" in error:
        return (
            f"Cannot reach a PostgreSQL server at {host}:{port} (DATABASE_URL): start it, or unset "
            "DATABASE_URL to use SQLite in the data directory."
        )
    return None


if __name__ == "__main__":
    main()
