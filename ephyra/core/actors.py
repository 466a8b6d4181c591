"""Actor names: who caused a quest event, or asks a mission machine to move.

Until actors are user accounts everywhere, a name is free text typed or sent by someone, and
``"max "``, ``" max"`` and ``"max"`` must be one person (one maker, one checker, one claim
holder). So a name is normalised before anything compares or records it: Unicode NFKC (which
also folds compatibility forms such as full-width letters and the no-break space) and then the
white space around it removed. A name that is blank after that names no one and is refused.
"""

from __future__ import annotations

import unicodedata


def normalise_actor(name: str) -> str:
    """``name`` in NFKC with the white space around it removed (possibly empty: the caller
    refuses a blank name in its own words)."""
    return unicodedata.normalize("NFKC", name).strip()
