"""What the journal raises. A conflict is the normal answer to a lost race, not a failure."""

from __future__ import annotations

import pygit2

from journal.format import REF_PREFIX, hex_or_none


class JournalError(Exception):
    """The journal cannot do what was asked (a malformed commit, a wrong argument)."""


class JournalConflict(JournalError):
    """The quest's ref is not where the writer expected: someone else wrote first."""

    def __init__(
        self,
        quest_id: str,
        expected: pygit2.Oid | None,
        actual: pygit2.Oid | None,
        reason: str = "the ref moved",
    ) -> None:
        self.quest_id, self.expected, self.actual, self.reason = quest_id, expected, actual, reason
        self.ref = REF_PREFIX + quest_id
        was, now = hex_or_none(expected), hex_or_none(actual)
        super().__init__(f"{self.ref}: expected {was}, found {now}: {reason}")
