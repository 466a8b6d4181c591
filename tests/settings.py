"""Settings for the test run: the real ones, with a key that signs nothing real.

Tests run with DEBUG off, as production does, so SECRET_KEY must be present.
"""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-key-that-signs-nothing-real")

from ephyra.settings import *  # noqa: F403
