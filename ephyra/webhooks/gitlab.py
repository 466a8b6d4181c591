"""GitLab webhook payloads: only the fields Ephyra reads; everything else is ignored.

Event names are the ``X-Gitlab-Event`` header (``Push Hook``, ``Note Hook`` …). Shapes follow
GitLab's "Webhook events" reference; ``tests/intake/fixtures/gitlab`` holds examples of each.
GitLab has no ping: its "Test" button sends a sample of the chosen event, handled like any other.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ephyra.webhooks.facts import (
    ZERO_SHA,
    CheckResult,
    Comment,
    CommitSha,
    Deployment,
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

KIND = "gitlab"
_FULL_SHA = re.compile(r"/([0-9a-f]{40}|[0-9a-f]{64})/?$")
# Pipeline statuses that will not change again.
_FINISHED = frozenset({"success", "failed", "canceled", "skipped"})


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class User(_Model):
    username: str


class Project(_Model):
    path_with_namespace: str


class PushCommit(_Model):
    id: CommitSha


class PushHook(_Model):
    ref: str
    before: CommitSha
    after: CommitSha
    user_username: str | None = None
    commits: list[PushCommit] = []


class NoteAttributes(_Model):
    note: str
    noteable_type: str
    created_at: ForgeTime
    action: str | None = None  # sent since GitLab 16.11; older notes are all new ones
    system: bool = False


class NoteMergeRequest(_Model):
    iid: int
    source_branch: str
    description: str | None = None


class NoteIssue(_Model):
    iid: int
    description: str | None = None


class NoteHook(_Model):
    user: User
    project: Project
    object_attributes: NoteAttributes
    merge_request: NoteMergeRequest | None = None
    issue: NoteIssue | None = None


class LastCommit(_Model):
    id: CommitSha


class MergeRequestAttributes(_Model):
    iid: int
    source_branch: str
    description: str | None = None
    action: str | None = None
    last_commit: LastCommit | None = None


class MergeRequestHook(_Model):
    user: User | None = None
    project: Project
    object_attributes: MergeRequestAttributes


class DeploymentHook(_Model):
    status: str
    status_changed_at: ForgeTime | None = None
    environment: str
    environment_tier: str | None = None  # GitLab 15.x+: production, staging, testing, …
    short_sha: str = Field(pattern=r"^[0-9a-f]{4,64}$")
    commit_url: str | None = None
    user: User | None = None


class PipelineAttributes(_Model):
    id: int
    sha: CommitSha
    status: str
    ref: str | None = None
    finished_at: ForgeTime | None = None
    url: str | None = None


class PipelineHook(_Model):
    object_attributes: PipelineAttributes
    user: User | None = None


def _login(user: User | None) -> str | None:
    return user.username if user else None


def _push(p: PushHook) -> Fact:
    if ZERO_SHA.match(p.after):
        return Ignored(f"{p.ref} was deleted")
    return Push(
        p.ref, p.before, p.after, tuple(c.id for c in p.commits), actor(KIND, p.user_username)
    )


def _note(p: NoteHook) -> Fact:
    attrs = p.object_attributes
    if attrs.action not in (None, "create"):
        return Ignored(f"comment {attrs.action}: only new comments are taken")
    if attrs.system:
        return Ignored("a system note, not a person's comment")
    mr, issue = p.merge_request, p.issue
    if attrs.noteable_type == "MergeRequest" and mr is not None:
        quests = linked_quests(mr.source_branch, mr.description)
        review: ReviewRef | None = ReviewRef(p.project.path_with_namespace, mr.iid)
    elif attrs.noteable_type == "Issue" and issue is not None:
        quests, review = quests_in_text(issue.description), None
    else:
        return Ignored(f"a comment on a {attrs.noteable_type}: only issues and merge requests")
    return Comment(attrs.note, actor(KIND, p.user.username), attrs.created_at, quests, review)


def _merge_request(p: MergeRequestHook) -> Fact:
    attrs = p.object_attributes
    return Review(
        ReviewRef(p.project.path_with_namespace, attrs.iid),
        attrs.action or "update",
        linked_quests(attrs.source_branch, attrs.description),
        attrs.last_commit.id if attrs.last_commit else None,
        actor(KIND, _login(p.user)),
    )


def _deployment(p: DeploymentHook) -> Fact:
    if p.status != "success":
        return Ignored(f"deployment {p.status}: only successful deployments are recorded")
    # The payload names the full commit only inside commit_url; short_sha is its prefix.
    full = _FULL_SHA.search(p.commit_url or "")
    sha = full.group(1) if full and full.group(1).startswith(p.short_sha) else p.short_sha
    tier = None if p.environment_tier is None else p.environment_tier == "production"
    return Deployment(sha, p.environment, actor(KIND, _login(p.user)), p.status_changed_at, tier)


def _pipeline(p: PipelineHook) -> Fact:
    attrs = p.object_attributes
    if attrs.status not in _FINISHED:
        return Ignored(f"pipeline {attrs.status}: only finished pipelines are recorded")
    details: dict[str, Any] = {"pipeline": attrs.id}
    if attrs.url:
        details["url"] = attrs.url
    return CheckResult(
        attrs.sha, "pipeline", attrs.status, actor(KIND, _login(p.user)), attrs.finished_at, details
    )


_HANDLERS = {
    "Push Hook": (PushHook, _push),
    "Note Hook": (NoteHook, _note),
    "Merge Request Hook": (MergeRequestHook, _merge_request),
    "Deployment Hook": (DeploymentHook, _deployment),
    "Pipeline Hook": (PipelineHook, _pipeline),
}
EVENTS = frozenset(_HANDLERS)


def parse(event: str, payload: dict[str, Any]) -> Fact:
    """The fact in one GitLab delivery; raises PayloadInvalid for a bad payload we act on."""
    if event == "Confidential Note Hook":
        # Journals travel with the repository; a confidential comment must not.
        return Ignored("confidential comments are kept out of the quest journal")
    handler = _HANDLERS.get(event)
    if handler is None:
        return Ignored(f"GitLab event {event!r} is not one Ephyra acts on")
    model, read = handler
    try:
        parsed = model.model_validate(payload)
    except ValidationError as exc:
        raise summarise(event, exc) from None
    return read(parsed)
