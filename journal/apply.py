"""The write loop around the journal, and replay of a journal through the machine.

``apply`` is how an event reaches Git: load the head, ``decide`` against it, append with a
compare-and-swap; when another writer moved the ref first, reload and decide *again* against
the new head (the event may have become invalid, and then the refusal is the answer). Nothing
is ever forced. The randomness of the backoff lives here, in the shell; ``decide`` stays pure.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import pygit2

from ephyra.core.events import BaseEvent
from ephyra.core.machine import Decision, FoldResult, decide, fold, reused_id
from ephyra.core.quest import Quest
from ephyra.core.rules import DEFAULT_POLICY, MachinePolicy
from journal.errors import JournalConflict
from journal.store import Journal

ATTEMPTS = 100
LOCK_AFTER = 4  # lost races after which a writer takes the ref lock before it even loads
BACKOFF_BASE = 0.0005  # seconds; doubled per retry, capped, then drawn uniformly ("full jitter")
BACKOFF_CAP = 0.02


class Applied(NamedTuple):
    decision: Decision
    head: pygit2.Oid | None  # the quest's head after the call (unchanged unless accepted)
    retries: int  # how many CAS conflicts were lost before this answer
    # The event was journaled already, at the head or earlier (a redelivery, or a racing writer
    # with the same event that won): ``decision`` is the one that commit recorded, and nothing
    # was written again.
    duplicate: bool = False
    parent: pygit2.Oid | None = None  # what an accepted, written event was appended to


class RetriesExhausted(JournalConflict):
    """Every attempt lost the race; the event was not journaled."""


def apply(
    journal: Journal,
    event: BaseEvent,
    policy: MachinePolicy = DEFAULT_POLICY,
    *,
    attempts: int = ATTEMPTS,
    rng: random.Random | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Applied:
    """Decide ``event`` against the quest's journal head and journal it if accepted.

    A refused or absorbed event is returned as decided and leaves the journal as it was.
    Raises ``RetriesExhausted`` after ``attempts`` lost races in a row.

    Optimistic first: load, decide, CAS. But under sustained contention on one quest the
    writer that loaded first keeps winning (a loser learns it lost only after writing its
    objects, by when the winner is already on its next event), so after ``LOCK_AFTER`` losses a
    writer takes the ref's lock first and loads, decides and appends under it: it cannot lose
    once it holds the lock, and the others' CAS fails while it does. Starvation is bounded by
    the time it takes to get the lock.
    """
    quest_id = event.quest
    conflict: JournalConflict | None = None
    for retries in range(attempts):
        try:
            if retries < LOCK_AFTER:
                quest, head = journal.load(quest_id)
                answer = _answer(journal, quest, head, event, policy, retries)
                if isinstance(answer, Applied):
                    return answer
                new = journal.append(quest_id, head, answer, event)
                return Applied(answer, new, retries, parent=head)
            with journal.locked(quest_id) as slot:
                head = slot.head
                answer = _answer(journal, slot.quest, head, event, policy, retries)
                if not isinstance(answer, Applied):
                    slot.append(answer, event)
            if isinstance(answer, Applied):
                return answer
            return Applied(answer, slot.head, retries, parent=head)
        except JournalConflict as exc:
            conflict = exc
            rng = rng or random.Random()  # only on a lost race: seeding one reads urandom
            sleep(rng.uniform(0.0, min(BACKOFF_CAP, BACKOFF_BASE * 2**retries)))
    assert conflict is not None
    raise RetriesExhausted(
        quest_id, conflict.expected, conflict.actual, f"gave up after {attempts} attempts"
    )


def apply_all(
    journal: Journal, events: Sequence[BaseEvent], policy: MachinePolicy = DEFAULT_POLICY
) -> list[Applied]:
    """``apply`` for events of distinct quests, their objects written as one pack: each event
    is decided against its quest's head and its objects staged; the pack is written; then each
    ref moves by compare-and-swap, in order. An event whose ref another writer moved meanwhile
    is applied again on its own (``apply``: reload, decide again, retry)."""
    answers: list[Applied | None] = []
    staged: list[tuple[int, BaseEvent, pygit2.Oid | None, Decision, pygit2.Oid | None]] = []
    with journal.packing():
        for event in events:
            quest, head = journal.load(event.quest)
            answer = _answer(journal, quest, head, event, policy, 0)
            if isinstance(answer, Applied):
                answers.append(answer)  # a refusal, or the head's own event again
                continue
            try:
                commit = journal.stage(event.quest, head, answer, event)
            except JournalConflict:
                commit = None  # moved since it was loaded: decided again below
            answers.append(None)
            staged.append((len(answers) - 1, event, head, answer, commit))
    for index, event, head, decision, commit in staged:
        if commit is not None:
            try:
                journal.publish(event.quest, head, commit)
            except JournalConflict:
                pass
            else:
                answers[index] = Applied(decision, commit, 0, parent=head)
                continue
        answers[index] = apply(journal, event, policy)
    return answers  # type: ignore[return-value]


def _answer(
    journal: Journal,
    quest: Quest | None,
    head: pygit2.Oid | None,
    event: BaseEvent,
    policy: MachinePolicy,
    retries: int,
) -> Applied | Decision:
    """The final answer (a duplicate or a refusal), or the accepted decision to journal.

    A quest takes each event id once (docs/journal.md, "Event ids"). An event whose id the
    journal already used is answered from the commit that used it: an exact copy (a redelivery,
    or a racing writer with the same event that won, at the head or any earlier commit) with the
    decision that commit recorded, so it never counts twice; another event under that id with a
    refusal naming the earlier one. ``journal.ids`` finds the id without reading the history."""
    if head is not None:
        used = journal.ids.used(head, event.id)
        if used is not None:
            if journal.ids.same_event(used.commit, event):
                decision = journal.entry(used.commit).to_decision()
                return Applied(decision, head, retries, duplicate=True)
            refusal = reused_id(quest, event, used.type, f"commit {used.commit}")
            return Applied(refusal, head, retries)
    decision = decide(quest, event, policy)
    if not decision.accepted:
        return Applied(decision, head, retries)
    return decision


class Replayed(NamedTuple):
    fold: FoldResult
    stored: Quest | None  # quest.json at the head
    matches: bool


def replay_journal(
    journal: Journal, quest_id: str, policy: MachinePolicy = DEFAULT_POLICY
) -> Replayed:
    """Fold the journaled events and say whether the journal is what the machine produces.

    ``matches`` is True when every commit's decision (its trailers), ``quest.json`` and
    ``effects.json`` equal the replayed decision, quest and effects at that step, and the
    event-id index at the head lists what it must (``journal.event_ids``), so a head (or any
    earlier commit) whose files or message were edited by hand, or a journal written under
    another policy, does not match.
    """
    return _replay(journal, quest_id, policy)[0]


def first_mismatch(
    journal: Journal, quest_id: str, policy: MachinePolicy = DEFAULT_POLICY
) -> str | None:
    """Where replay and journal first disagree, in words; None when they agree."""
    return _replay(journal, quest_id, policy)[1]


def _replay(journal: Journal, quest_id: str, policy: MachinePolicy) -> tuple[Replayed, str | None]:
    entries = journal.history(quest_id)
    result = fold((entry.event for entry in entries), policy)
    stored = entries[-1].quest if entries else None
    problem = None
    for entry, decision in zip(entries, result.decisions, strict=True):
        if decision.to_dict() != entry.decision:
            problem = f"{entry.oid}: the trailers differ from the replayed decision"
        elif decision.quest != entry.quest:
            problem = f"{entry.oid}: quest.json differs from the replayed quest"
        elif [e.to_dict() for e in decision.effects] != entry.effects:
            problem = f"{entry.oid}: effects.json differs from the replayed effects"
        if problem:
            break
    if problem is None and result.quests.get(quest_id) != stored:
        problem = "the head's quest.json differs from the folded quest"
    if problem is None and entries:
        history = [
            (entry.oid, entry.decision["event"], entry.decision["type"]) for entry in entries
        ]
        problem = journal.ids.problem(entries[-1].oid, history)
    return Replayed(result, stored, problem is None), problem
