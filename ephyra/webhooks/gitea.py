"""Gitea and Forgejo webhook payloads: only the fields Ephyra reads; everything else is ignored.

Forgejo is a fork of Gitea and sends the same payloads. Event names are the ``X-Gitea-Event``
(or ``X-Forgejo-Event``) header; Gitea sends comments on pull requests as ``issue_comment``
with ``is_pull`` set. Gitea has no ping: "Test delivery" sends a sample push.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ephyra.webhooks.facts import (
    ZERO_SHA,
    CheckResult,
    Comment,
    CommitSha,
    Fact,
    ForgeTime,
    Ignored,
    Push,
    Review,
    ReviewRef,
    actor,
    linked_quests,
    quests_in_text,
    summarise,
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class User(_Model):
    login: str | None = None
    username: str | None = None

    @property
    def name(self) -> str | None:
        return self.login or self.username


class Repository(_Model):
    full_name: str


class PushCommit(_Model):
    id: CommitSha


class PushEvent(_Model):
    ref: str
    before: CommitSha
    after: CommitSha
    commits: list[PushCommit] = []
    pusher: User | None = None
    sender: User | None = None


class Issue(_Model):
    number: int
    body: str | None = None
    pull_request: dict[str, Any] | None = None


class IssueComment(_Model):
    body: str
    user: User
    created_at: ForgeTime


class IssueCommentEvent(_Model):
    action: str
    issue: Issue
    comment: IssueComment
    repository: Repository
    is_pull: bool = False


class Branch(_Model):
    ref: str
    sha: CommitSha


class PullRequest(_Model):
    number: int
    body: str | None = None
    head: Branch


class PullRequestEvent(_Model):
    action: str
    pull_request: PullRequest
    repository: Repository
    sender: User | None = None


class StatusEvent(_Model):
    """A commit status (``status``, Gitea's CommitStatusPayload): what Gitea Actions and an
    outside CI report on a commit."""

    sha: CommitSha
    state: str
    context: str
    updated_at: ForgeTime | None = None
    created_at: ForgeTime | None = None
    target_url: str | None = None
    sender: User | None = None


def _push(kind: str, p: PushEvent) -> Fact:
    if ZERO_SHA.match(p.after):
        return Ignored(f"{p.ref} was deleted")
    who = (p.pusher or p.sender or User()).name
    return Push(p.ref, p.before, p.after, tuple(c.id for c in p.commits), actor(kind, who))


def _issue_comment(kind: str, p: IssueCommentEvent) -> Fact:
    if p.action != "created":
        return Ignored(f"issue_comment {p.action}: only new comments are taken")
    on_pull = p.is_pull or p.issue.pull_request is not None
    return Comment(
        p.comment.body,
        actor(kind, p.comment.user.name),
        p.comment.created_at,
        quests_in_text(p.issue.body),
        ReviewRef(p.repository.full_name, p.issue.number) if on_pull else None,
    )


def _pull_request(kind: str, p: PullRequestEvent) -> Fact:
    pr = p.pull_request
    return Review(
        ReviewRef(p.repository.full_name, pr.number),
        p.action,
        linked_quests(pr.head.ref, pr.body),
        pr.head.sha,
        actor(kind, p.sender.name if p.sender else None),
    )


def _status(kind: str, p: StatusEvent) -> Fact:
    if p.state == "pending":
        return Ignored("commit status pending: only final statuses are recorded")
    details = {"url": p.target_url} if p.target_url else {}
    who = actor(kind, p.sender.name if p.sender else None)
    return CheckResult(p.sha, p.context, p.state, who, p.updated_at or p.created_at, details)


_HANDLERS = {
    "push": (PushEvent, _push),
    "status": (StatusEvent, _status),
    "issue_comment": (IssueCommentEvent, _issue_comment),
    "pull_request": (PullRequestEvent, _pull_request),
}
EVENTS = frozenset(_HANDLERS)


def parse(event: str, payload: dict[str, Any], *, kind: str = "gitea") -> Fact:
    """The fact in one Gitea (``kind="forgejo"``: Forgejo) delivery; raises PayloadInvalid for
    a bad payload we act on."""
    handler = _HANDLERS.get(event)
    if handler is None:
        return Ignored(f"{kind.capitalize()} event {event!r} is not one Ephyra acts on")
    model, read = handler
    try:
        parsed = model.model_validate(payload)
    except ValidationError as exc:
        raise summarise(event, exc) from None
    return read(kind, parsed)
