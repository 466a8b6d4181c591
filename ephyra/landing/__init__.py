"""Landing on a plain Git remote: write an approved patch to the base branch, rebase a patch
onto a base that moved, roll a landed patch back, and check whether a push landed.

Every write to the remote is a ``git push`` with ``--force-with-lease=<base>:<expected>`` of a
commit that descends from ``<expected>``: a compare-and-swap on the base, never a force. The
commits to push are made in the workspace's bare mirror, in memory (pygit2); the git command
line talks to the remote, with git's own credential helper or a credentials file.

- ``land`` → ``Landed`` | ``BaseMoved`` | ``Refused``; ``landed_on`` → True | False | None;
- ``rebase`` → ``Rebased`` | ``Conflict``;
- ``rollback`` → ``RolledBack`` | ``BaseMoved`` | ``Conflict`` | ``Refused``;
- ``NoAnswer`` is raised when the remote gave no answer; its ``sent`` says whether a push had
  started (then whether it landed is unknown, and ``landed_on`` settles it).

Pure of Django: the standard library, pygit2 and the git CLI, nothing else of the project
(the import-linter contract allows ``ephyra.core`` and ``ephyra.policy``). The Django
adapters that feed the outcomes back as quest events are in the ``landing`` app;
``docs/work.md`` ("Landing", "Rollback") describes it for operators.
"""

from ephyra.landing.commits import COMMITTER, with_trailers
from ephyra.landing.land import STYLES, land, landed_on, prepared_ref
from ephyra.landing.rebase import RebaseError, rebase
from ephyra.landing.remote import fetch_base
from ephyra.landing.results import (
    BaseMoved,
    Conflict,
    Landed,
    NoAnswer,
    Rebased,
    Refused,
    RolledBack,
)
from ephyra.landing.rollback import rollback

__all__ = [
    "COMMITTER",
    "STYLES",
    "BaseMoved",
    "Conflict",
    "Landed",
    "NoAnswer",
    "RebaseError",
    "Rebased",
    "Refused",
    "RolledBack",
    "fetch_base",
    "land",
    "landed_on",
    "prepared_ref",
    "rebase",
    "rollback",
    "with_trailers",
]
