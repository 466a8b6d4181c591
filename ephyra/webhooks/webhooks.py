"""From a verified forge delivery to quest events.

The Django side reads the request and the database; everything it decides with is here:
which headers each forge uses, which fact a payload states, which quests a fact concerns and
which quest events it becomes. Event ids are ``<prefix>-<delivery id>-<n>`` (``gh``, ``gl``,
``gt``, ``fj``), so a redelivery names the same events and the inbound queue takes them once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ephyra.core.events import (
    BaseEvent,
    BaseMoved,
    ChecksReported,
    CommentAdded,
    ForgeCheck,
)
from ephyra.core.states import TERMINAL, State
from ephyra.webhooks import gitea, github, gitlab
from ephyra.webhooks.facts import (
    CheckResult,
    Comment,
    Deployment,
    Fact,
    Ignored,
    Push,
    Review,
)

# A delivery id becomes part of event ids (the core's Ident pattern, 128 characters at most).
DELIVERY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
COMMENT_LIMIT = 4000  # CommentAdded.body


@dataclass(frozen=True)
class Scheme:
    """How one forge delivers: its headers, in the order they are read, and what it may send."""

    kind: str
    label: str
    prefix: str
    event_headers: tuple[str, ...]
    delivery_headers: tuple[str, ...]
    proof_headers: tuple[str, ...]  # the signature, or GitLab's token
    content_types: frozenset[str]

    @property
    def uses_token(self) -> bool:
        return self.kind == "gitlab"


_JSON = frozenset({"application/json"})
SCHEMES: Mapping[str, Scheme] = {
    "github": Scheme(
        "github",
        "GitHub",
        "gh",
        ("X-GitHub-Event",),
        ("X-GitHub-Delivery",),
        ("X-Hub-Signature-256",),
        # GitHub documents both; the form carries the JSON in its ``payload`` field.
        _JSON | {"application/x-www-form-urlencoded"},
    ),
    "gitlab": Scheme(
        "gitlab",
        "GitLab",
        "gl",
        ("X-Gitlab-Event",),
        # Idempotency-Key (GitLab 17.4+) stays the same when GitLab retries; the event UUID is
        # what older versions send.
        ("Idempotency-Key", "X-Gitlab-Event-UUID"),
        ("X-Gitlab-Token",),
        _JSON,
    ),
    # Forgejo sends its own headers and Gitea's; either endpoint reads either.
    "gitea": Scheme(
        "gitea",
        "Gitea",
        "gt",
        ("X-Gitea-Event", "X-Forgejo-Event"),
        ("X-Gitea-Delivery", "X-Forgejo-Delivery"),
        ("X-Gitea-Signature", "X-Forgejo-Signature"),
        _JSON,
    ),
    "forgejo": Scheme(
        "forgejo",
        "Forgejo",
        "fj",
        ("X-Forgejo-Event", "X-Gitea-Event"),
        ("X-Forgejo-Delivery", "X-Gitea-Delivery"),
        ("X-Forgejo-Signature", "X-Gitea-Signature"),
        _JSON,
    ),
}


def parse_delivery(kind: str, event: str, payload: dict[str, Any]) -> Fact:
    """The fact one delivery states. Raises ``PayloadInvalid`` when a payload of an event type
    Ephyra acts on is missing something it reads."""
    if kind == "github":
        return github.parse(event, payload)
    if kind == "gitlab":
        return gitlab.parse(event, payload)
    return gitea.parse(event, payload, kind=kind)


# --- quests -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpenQuest:
    """What the mapping needs of a quest: the fields of ``Quest.to_dict()`` it reads."""

    id: str
    state: State
    base: str | None = None
    patch_head: str | None = None
    landed_commit: str | None = None
    deployed_commit: str | None = None
    resume_state: State | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OpenQuest:
        resume = data.get("resume_state")
        return cls(
            id=data["id"],
            state=State(data["state"]),
            base=data.get("base"),
            patch_head=data.get("patch_head"),
            landed_commit=data.get("landed_commit"),
            deployed_commit=data.get("deployed_commit"),
            resume_state=State(resume) if resume else None,
        )


# The base matters from the moment a patch is recorded until it lands: a proof made on the old
# base proves nothing about the new one (docs/lifecycle.md, base_moved). A quest held in review
# or parked at one of these states counts too; the machine keeps the work for its resumption.
BASE_STATES = frozenset({State.PROVING, State.READY, State.LANDING})
_HELD = frozenset({State.HANDED_OFF, State.PARKED})
PATCH_STATES = frozenset({State.PATCHING, *BASE_STATES, *_HELD})


def base_matters(quest: OpenQuest) -> bool:
    if quest.patch_head is None or quest.landed_commit is not None:
        return False
    if quest.state in BASE_STATES:
        return True
    return quest.state in _HELD and quest.resume_state in BASE_STATES


@dataclass(frozen=True)
class Selection:
    """Which quests of the workspace a fact may concern: those in ``states`` or named in ``ids``."""

    states: frozenset[State] = frozenset()
    ids: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.states or self.ids)


def for_workspace(fact: Fact, base_branch: str) -> Fact:
    """A push to any branch but the workspace's base is not a base move."""
    if isinstance(fact, Push) and fact.ref != f"refs/heads/{base_branch}":
        return Ignored(f"a push to {fact.ref}, not to the base branch {base_branch}")
    return fact


def selection(fact: Fact, linked: Iterable[str] = ()) -> Selection:
    """The quests to load for ``fact``; ``linked`` are quests tied earlier to its review."""
    if isinstance(fact, Push):
        return Selection(states=BASE_STATES | _HELD)
    if isinstance(fact, Comment):
        return Selection(ids=fact.quests | frozenset(linked))
    if isinstance(fact, CheckResult):
        return Selection(states=PATCH_STATES)
    if isinstance(fact, Review):
        return Selection(ids=fact.quests)
    return Selection()


# What a forge's conclusion says of the patch. Anything else (neutral, skipped, cancelled, a
# warning, stale) says neither: it is recorded and decides nothing.
PASSED = frozenset({"success"})
FAILED = frozenset(
    {"failure", "failed", "error", "timed_out", "action_required", "startup_failure"}
)
# The states in which the machine takes checks_reported (ephyra.core.forge_reports).
CHECKED_STATES = frozenset({State.PROVING, State.READY, State.LANDING, *_HELD})

Contains = Callable[[str, str], bool | None]
"""``contains(deployed, landed)``: whether the deployed commit's history holds the landed one;
None when the repository cannot tell (a commit it does not have)."""


def _no_ancestry(deployed: str, landed: str) -> bool | None:
    return None


def deployed_landing(
    fact: Deployment, quest: OpenQuest, contains: Contains = _no_ancestry
) -> tuple[str, str] | None:
    """``(deployed commit, landed commit)`` when ``fact`` carries ``quest``'s landed commit out:
    the same commit, or (as ``contains`` finds in the repository) a later one."""
    landed = quest.landed_commit
    if quest.state is not State.WATCHING or not landed:
        return None
    if landed == fact.sha:
        return landed, landed
    if len(fact.sha) < len(landed):
        # GitLab may name only a prefix of the commit; eight hex digits are unambiguous enough
        # among the few quests that are watching, and the event then names the full commit.
        return (landed, landed) if landed.startswith(fact.sha) else None
    return (fact.sha, landed) if contains(fact.sha, landed) else None


def concerned(fact: Fact, quests: Iterable[OpenQuest]) -> list[str]:
    """The ids of the quests a recorded fact is about, sorted: a check on its patch head, a
    review naming it. (A deployment is decided by intake's deployments service, which asks
    ``deployed_landing`` of each watching quest.)"""
    if isinstance(fact, CheckResult):
        return sorted(q.id for q in quests if q.patch_head == fact.sha)
    if isinstance(fact, Review):
        return sorted(q.id for q in quests if q.id in fact.quests)
    return []


def event_id(prefix: str, delivery: str, n: int) -> str:
    return f"{prefix}-{delivery}-{n}"


def quest_events(
    fact: Fact,
    quests: Iterable[OpenQuest],
    *,
    prefix: str,
    delivery: str,
    received_at: datetime,
) -> list[BaseEvent]:
    """The quest events ``fact`` becomes, in quest-id order so the numbering is stable.

    - a push to the base branch → ``base_moved`` for each quest whose base matters, except a
      landing quest whose own patch the push carries (that is its landing, not a move);
    - a new comment → ``comment_added`` on each active quest it is tied to;
    - a check that passed or failed → ``checks_reported`` on each quest whose patch head it
      ran on, while that patch is proving, ready or landing (or held or parked there).
    Everything else becomes no quest event (see ``concerned`` for what is recorded).
    """
    ordered = sorted(quests, key=lambda q: q.id)
    if isinstance(fact, CheckResult):
        if fact.conclusion not in PASSED | FAILED:
            return []
        check = ForgeCheck(name=fact.name[:200] or "check", passed=fact.conclusion in PASSED)
        targets = [
            q
            for q in ordered
            if q.patch_head == fact.sha and q.landed_commit is None and q.state in CHECKED_STATES
        ]
        return [
            ChecksReported(
                id=event_id(prefix, delivery, n),
                quest=q.id,
                at=fact.at or received_at,
                actor=fact.actor,
                head=fact.sha,
                checks=(check,),
            )
            for n, q in enumerate(targets)
        ]
    if isinstance(fact, Push):
        pushed = {*fact.commits, fact.after}
        targets = [
            q
            for q in ordered
            if base_matters(q)
            and q.base != fact.after
            and not (q.state is State.LANDING and q.patch_head in pushed)
        ]
        return [
            BaseMoved(
                id=event_id(prefix, delivery, n),
                quest=q.id,
                at=received_at,
                actor=fact.actor,
                base=fact.after,
            )
            for n, q in enumerate(targets)
        ]
    if isinstance(fact, Comment):
        body = (
            fact.body if len(fact.body) <= COMMENT_LIMIT else fact.body[: COMMENT_LIMIT - 1] + "…"
        )
        targets = [q for q in ordered if q.state not in TERMINAL]
        return [
            CommentAdded(
                id=event_id(prefix, delivery, n),
                quest=q.id,
                at=fact.at or received_at,
                actor=fact.actor,
                body=body,
            )
            for n, q in enumerate(targets)
        ]
    return []
