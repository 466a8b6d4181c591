"""Whether a deployed commit carries a landed one, asked of the workspace's repository mirror.

A forge says which commit it deployed, not what that commit contains: a deployment of a later
commit of the base branch carries every commit before it. The mirror knows the history; the
core does not (it is pure) and neither does the payload, so the webhook shell asks here.
"""

from __future__ import annotations

import pygit2


def contains(repository: str, deployed: str, landed: str) -> bool | None:
    """True when ``landed`` is ``deployed`` or one of its ancestors, False when it is not, and
    None when the mirror cannot tell: it cannot be opened, or lacks either commit (a deployment
    of a commit not fetched yet). Only full commit ids are looked up; a prefix is not guessed."""
    if deployed == landed:
        return True
    try:
        repo = pygit2.Repository(repository)
        deployed_oid, landed_oid = pygit2.Oid(hex=deployed), pygit2.Oid(hex=landed)
        if deployed_oid not in repo or landed_oid not in repo:
            return None
        return repo.descendant_of(deployed_oid, landed_oid)
    except (pygit2.GitError, ValueError, KeyError):
        return None
