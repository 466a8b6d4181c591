"""Settings for the test run: the real ones, with a key that signs nothing real.

Tests run with DEBUG off, as production does. The key is given, as production gives it, so the
test run makes no key file in the data directory.
"""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-key-that-signs-nothing-real")
# No worker listens to most tests; the worker tests turn the doorbell on in their processes.
os.environ.setdefault("EPHYRA_DOORBELL", "false")

from ephyra.settings import *  # noqa: F403

# A file, not memory, for the SQLite test database, so that worker processes started by a test
# (tests/ledger) open the same database; one per test process, so parallel runs do not collide.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": str(DATA_DIR / f"test-{os.getpid()}.sqlite3")  # noqa: F405
    }
