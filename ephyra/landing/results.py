"""What a landing, a rebase or a rollback came to. Each function of ``ephyra.landing`` returns
one of these for every answer it got; ``NoAnswer`` is raised when there was none."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Landed:
    """The remote's base now holds ``commit`` (pushed now, or found there from an earlier
    attempt under the same key). ``style`` is how it was made."""

    commit: str
    style: str
    already: bool = False  # found on the base, not pushed by this call


@dataclass(frozen=True, slots=True)
class BaseMoved:
    """The remote's base is not the expected commit any more: nothing was written."""

    base: str


@dataclass(frozen=True, slots=True)
class Refused:
    """Nothing was written, and trying again will not change that without a person: the patch
    does not fast-forward and no other style is allowed, a merge or a replay conflicts (the
    paths in ``files``), or the remote refused the push (``detail`` holds git's words).
    ``reason`` is one word, as the machine's ``landing_failed`` and ``rollback_failed`` take."""

    reason: str
    detail: str
    files: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Conflict:
    """Replaying or reverting conflicts in ``files``; nothing was changed."""

    files: tuple[str, ...]
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Rebased:
    """The patch branch now holds the patch replayed onto ``base``, ending at ``head``."""

    head: str
    base: str


@dataclass(frozen=True, slots=True)
class RolledBack:
    """The landed change is off the base: ``revert_commit`` reverted it (pushed now, or found
    there), or is None when there was nothing left to revert (someone had reverted it)."""

    revert_commit: str | None
    already: bool = False


class NoAnswer(Exception):
    """The remote gave no answer (a timeout, a refused or dropped connection, credentials that
    do not work). ``sent`` says whether a push had started: if it had, whether it landed is
    unknown (ambiguous, for a check to settle); if not, nothing was written."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent
