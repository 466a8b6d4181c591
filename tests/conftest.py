import os

from hypothesis import HealthCheck, settings

# Replays must be deterministic, not fast: no per-example deadline, so a loaded CI machine
# does not turn a slow example into a failure.
settings.register_profile(
    "ephyra", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ephyra"))
