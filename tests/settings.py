"""Settings for the test run: the real ones, with a key that signs nothing real.

Tests run with DEBUG off, as production does, so SECRET_KEY must be present.
"""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-key-that-signs-nothing-real")
# No worker listens to most tests; the worker tests turn the doorbell on in their processes.
os.environ.setdefault("EPHYRA_DOORBELL", "false")

from ephyra.settings import *  # noqa: F403
