"""What a forge delivery says, in words that do not depend on the forge.

Each forge module validates its own payload shapes and returns one of these facts; the mapping
to quest events (``ephyra.webhooks.webhooks``) reads only facts. This is also where a forge object
is tied to a quest: by the branch ``ephyra/<quest-id>`` or by the marker
``<!-- ephyra:quest=<quest-id> -->`` in a pull request's, merge request's or issue's body.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError

# The Ident pattern of ephyra.core.events, so a quest id found in a forge object is a valid one.
_IDENT = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
QUEST_MARKER = re.compile(rf"<!--\s*ephyra:quest=({_IDENT})\s*-->")
QUEST_BRANCH = re.compile(rf"^(?:refs/heads/)?ephyra/({_IDENT})$")
ZERO_SHA = re.compile(r"^0+$")
# An environment the forge gives no tier for is production when it is named so.
PRODUCTION_NAMES = frozenset({"production", "prod"})

CommitSha = Annotated[str, Field(pattern=r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")]


class PayloadInvalid(ValueError):
    """A payload of an event type Ephyra acts on lacks a field it needs, or has a wrong one."""


def parse_time(value: Any) -> Any:
    """ISO 8601 as GitHub and Gitea send it, and GitLab's ``2015-05-17 18:21:36 UTC`` and
    ``2021-04-28 21:50:00 +0200``, as UTC. A time without an offset is UTC: that is what all
    three forges mean by one."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.endswith(" UTC"):
        text = text[:-4] + "+00:00"
    text = re.sub(r"\s+([+-]\d{2}):?(\d{2})$", r"\1:\2", text)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("not a time the forge is known to send") from None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


ForgeTime = Annotated[datetime, BeforeValidator(parse_time)]


def quest_from_branch(ref: str | None) -> str | None:
    match = QUEST_BRANCH.match(ref or "")
    return match.group(1) if match else None


def quests_in_text(text: str | None) -> frozenset[str]:
    return frozenset(QUEST_MARKER.findall(text or ""))


def linked_quests(branch: str | None, body: str | None) -> frozenset[str]:
    found = quests_in_text(body)
    from_branch = quest_from_branch(branch)
    return (found | {from_branch}) if from_branch else found


def summarise(label: str, exc: ValidationError) -> PayloadInvalid:
    """The validation problem in one line, naming fields but never echoing their values."""
    errors = exc.errors(include_url=False, include_input=False)
    parts = [
        f"{'.'.join(str(p) for p in err['loc']) or 'payload'}: {err['msg']}" for err in errors[:3]
    ]
    if len(errors) > 3:
        parts.append(f"and {len(errors) - 3} more")
    return PayloadInvalid(f"invalid {label} payload: " + "; ".join(parts))


def actor(kind: str, login: str | None) -> str:
    return f"{kind}:{login}"[:200] if login else kind


# --- facts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ping:
    """The forge checking that the hook works."""


@dataclass(frozen=True)
class Ignored:
    """A delivery Ephyra takes (so the forge keeps the hook enabled) and does not act on."""

    reason: str


@dataclass(frozen=True)
class Push:
    ref: str
    before: str
    after: str
    commits: tuple[str, ...]
    actor: str


@dataclass(frozen=True)
class Comment:
    """A new comment. ``quests`` come from the payload (branch or marker); ``review`` names the
    pull request or merge request it is on, so a link recorded earlier can add more."""

    body: str
    actor: str
    at: datetime | None
    quests: frozenset[str] = frozenset()
    review: ReviewRef | None = None


@dataclass(frozen=True)
class ReviewRef:
    repository: str
    number: int


@dataclass(frozen=True)
class Review:
    """A pull request (merge request) opened or changed; linked when it names a quest."""

    ref: ReviewRef
    action: str
    quests: frozenset[str]
    head: str | None
    actor: str


@dataclass(frozen=True)
class Deployment:
    """A successful deployment of ``sha`` (GitLab may give only its first eight digits).
    ``production`` is what the forge says of the environment (GitHub's
    ``production_environment``, GitLab's ``environment_tier``), None when it says nothing."""

    sha: str
    environment: str
    actor: str
    at: datetime | None
    production: bool | None = None

    @property
    def to_production(self) -> bool:
        if self.production is not None:
            return self.production
        return self.environment.strip().lower() in PRODUCTION_NAMES


@dataclass(frozen=True)
class CheckResult:
    """A finished check run, commit status or pipeline on ``sha``."""

    sha: str
    name: str
    conclusion: str
    actor: str
    at: datetime | None
    details: dict[str, Any] = field(default_factory=dict)


Fact = Ping | Ignored | Push | Comment | Review | Deployment | CheckResult
