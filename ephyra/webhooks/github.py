"""GitHub webhook payloads: only the fields Ephyra reads; everything else is ignored.

Event names are the ``X-GitHub-Event`` header. Shapes follow GitHub's "Webhook events and
payloads" reference; ``tests/intake/fixtures/github`` holds examples of each.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ephyra.webhooks.facts import (
    ZERO_SHA,
    CheckResult,
    Comment,
    CommitSha,
    Deployment,
    Fact,
    ForgeTime,
    Ignored,
    Ping,
    Push,
    Review,
    ReviewRef,
    actor,
    linked_quests,
    quests_in_text,
    summarise,
)

KIND = "github"


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class User(_Model):
    login: str


class Repository(_Model):
    full_name: str


class PushCommit(_Model):
    id: CommitSha


class PushEvent(_Model):
    ref: str
    before: CommitSha
    after: CommitSha
    deleted: bool = False
    commits: list[PushCommit] = []
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


class ReviewCommentEvent(_Model):
    action: str
    comment: IssueComment
    pull_request: PullRequest
    repository: Repository


class DeploymentStatus(_Model):
    state: str
    environment: str | None = None
    created_at: ForgeTime


class DeploymentRecord(_Model):
    sha: CommitSha
    environment: str = ""
    production_environment: bool | None = None


class DeploymentStatusEvent(_Model):
    deployment_status: DeploymentStatus
    deployment: DeploymentRecord
    sender: User | None = None


class CheckRun(_Model):
    head_sha: CommitSha
    name: str
    status: str
    conclusion: str | None = None
    completed_at: ForgeTime | None = None
    html_url: str | None = None


class CheckRunEvent(_Model):
    action: str
    check_run: CheckRun
    sender: User | None = None


class StatusEvent(_Model):
    sha: CommitSha
    state: str
    context: str
    updated_at: ForgeTime | None = None
    target_url: str | None = None
    sender: User | None = None


def _login(user: User | None) -> str | None:
    return user.login if user else None


def _push(p: PushEvent) -> Fact:
    if p.deleted or ZERO_SHA.match(p.after):
        return Ignored(f"{p.ref} was deleted")
    return Push(
        p.ref, p.before, p.after, tuple(c.id for c in p.commits), actor(KIND, _login(p.sender))
    )


def _issue_comment(p: IssueCommentEvent) -> Fact:
    if p.action != "created":
        return Ignored(f"issue_comment {p.action}: only new comments are taken")
    review = ReviewRef(p.repository.full_name, p.issue.number) if p.issue.pull_request else None
    return Comment(
        p.comment.body,
        actor(KIND, p.comment.user.login),
        p.comment.created_at,
        quests_in_text(p.issue.body),
        review,
    )


def _review_comment(p: ReviewCommentEvent) -> Fact:
    if p.action != "created":
        return Ignored(f"pull_request_review_comment {p.action}: only new comments are taken")
    pr = p.pull_request
    return Comment(
        p.comment.body,
        actor(KIND, p.comment.user.login),
        p.comment.created_at,
        linked_quests(pr.head.ref, pr.body),
        ReviewRef(p.repository.full_name, pr.number),
    )


def _pull_request(p: PullRequestEvent) -> Fact:
    pr = p.pull_request
    return Review(
        ReviewRef(p.repository.full_name, pr.number),
        p.action,
        linked_quests(pr.head.ref, pr.body),
        pr.head.sha,
        actor(KIND, _login(p.sender)),
    )


def _deployment_status(p: DeploymentStatusEvent) -> Fact:
    status = p.deployment_status
    if status.state != "success":
        return Ignored(f"deployment {status.state}: only successful deployments are recorded")
    environment = status.environment or p.deployment.environment
    return Deployment(
        p.deployment.sha,
        environment,
        actor(KIND, _login(p.sender)),
        status.created_at,
        p.deployment.production_environment,
    )


def _check_run(p: CheckRunEvent) -> Fact:
    run = p.check_run
    if run.status != "completed" or run.conclusion is None:
        return Ignored(f"check run {run.status}: only finished check runs are recorded")
    details = {"url": run.html_url} if run.html_url else {}
    return CheckResult(
        run.head_sha,
        run.name,
        run.conclusion,
        actor(KIND, _login(p.sender)),
        run.completed_at,
        details,
    )


def _status(p: StatusEvent) -> Fact:
    if p.state == "pending":
        return Ignored("commit status pending: only final statuses are recorded")
    details = {"url": p.target_url} if p.target_url else {}
    return CheckResult(
        p.sha, p.context, p.state, actor(KIND, _login(p.sender)), p.updated_at, details
    )


_HANDLERS = {
    "push": (PushEvent, _push),
    "issue_comment": (IssueCommentEvent, _issue_comment),
    "pull_request_review_comment": (ReviewCommentEvent, _review_comment),
    "pull_request": (PullRequestEvent, _pull_request),
    "deployment_status": (DeploymentStatusEvent, _deployment_status),
    "check_run": (CheckRunEvent, _check_run),
    "status": (StatusEvent, _status),
}
EVENTS = frozenset(_HANDLERS) | {"ping"}


def parse(event: str, payload: dict[str, Any]) -> Fact:
    """The fact in one GitHub delivery; raises PayloadInvalid for a bad payload we act on."""
    if event == "ping":
        return Ping()
    handler = _HANDLERS.get(event)
    if handler is None:
        return Ignored(f"GitHub event {event!r} is not one Ephyra acts on")
    model, read = handler
    try:
        parsed = model.model_validate(payload)
    except ValidationError as exc:
        raise summarise(event, exc) from None
    return read(parsed)
