"""Settings for the test run: the real ones, with a key that signs nothing real.

Tests run with DEBUG off, as production does. The key is given, as production gives it, so the
test run makes no key file in the data directory.
"""

import os
from pathlib import Path
from urllib.parse import urlsplit

os.environ.setdefault("SECRET_KEY", "tests-only-key-that-signs-nothing-real")
# No worker listens to most tests; the worker tests turn the doorbell on in their processes.
os.environ.setdefault("EPHYRA_DOORBELL", "false")


def _own_redis_database(url: str, index: int) -> str:
    """The same Redis server, database ``n + index`` for a URL that names database ``n``."""
    parts = urlsplit(url)
    return parts._replace(path=f"/{int(parts.path.strip('/') or 0) + index}").geturl()


# Under pytest-xdist (`make test` runs the suite in several processes), each test process has
# its own data directory (SQLite files, the file broker, mirrors, worktrees) and its own Redis
# database (the Celery queue, the cache), so one process's workers never take another's tasks.
# Set once: a test's subprocess that imports these settings again inherits the result.
_xdist = os.environ.get("PYTEST_XDIST_WORKER")
if _xdist and os.environ.get("EPHYRA_TEST_PROCESS") != _xdist:
    os.environ["EPHYRA_TEST_PROCESS"] = _xdist
    _base = Path(os.environ.get("EPHYRA_DATA_DIR") or Path(__file__).parents[1] / ".ephyra")
    os.environ["EPHYRA_DATA_DIR"] = str(_base.resolve() / f"test-{_xdist}")
    if os.environ.get("REDIS_URL"):
        os.environ["REDIS_URL"] = _own_redis_database(
            os.environ["REDIS_URL"], int(_xdist.removeprefix("gw"))
        )

from django.conf import global_settings  # noqa: E402

from ephyra.settings import *  # noqa: E402, F403

# A file, not memory, for the SQLite test database, so that worker processes started by a test
# (tests/ledger) open the same database; one per test process, so parallel runs do not collide.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": str(DATA_DIR / f"test-{os.getpid()}.sqlite3")  # noqa: F405
    }

# Django's advice for test runs: a fast password hasher. The suite makes several hundred
# accounts, and PBKDF2 at a million rounds cost each a third of a CPU second. Put first, so
# accounts made here use it; the real hashers stay, for servers a test starts on its own settings.
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    *global_settings.PASSWORD_HASHERS,
]
