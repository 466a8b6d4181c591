"""The autonomy policy: what an admin edits, parsed and validated, and the pure rules it drives."""

from ephyra.policy.autonomy import (
    DEFAULT_POLICY_PATH,
    AutonomyPolicy,
    PolicyError,
    default_policy,
    load_policy,
    parse_policy,
)

__all__ = [
    "DEFAULT_POLICY_PATH",
    "AutonomyPolicy",
    "PolicyError",
    "default_policy",
    "load_policy",
    "parse_policy",
]
