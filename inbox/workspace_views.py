"""The workspaces pages: the list of a person's workspaces with their health, adding one, and a
workspace's own page for its admins (health, repository, ingest tokens, forge hooks, roles).

The list answers anyone logged in, with the workspaces they hold a role in; adding a workspace
needs a superuser or Django's ``quests.add_workspace`` permission. A workspace's page and its
actions need the admin role there: reviewers and staff of the workspace get 403, people of
other workspaces 404, as if it did not exist.

A token or a hook secret is shown once, in the answer to the POST that made it (201): a secret
cannot survive a redirect without being stored somewhere, and nothing stores it. That answer is
marked ``Cache-Control: no-store``, and its form's one-time key makes a resubmission a refusal,
not a second secret. Every other action is a POST answered with a redirect (303).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from inbox.forms import HookCreateForm, OnceForm, TokenCreateForm, WorkspaceAddForm
from intake.hooks.services import (
    hook_endpoint,
    hook_register,
    hook_remove,
    hook_secret_hint,
    hook_set_enabled,
)
from intake.models import Hook, WebhookDelivery
from intake.otlp.models import IngestedSignal, IngestToken
from intake.otlp.tokens import token_issue, token_revoke
from ledger.models import InboundEvent, JournalReplica, Operation
from ledger.selectors import operation_counts
from quests.models import PolicyProposal, Workspace
from quests.roles import Role, allows, group_name, workspace_roles
from quests.workspaces import workspace_add

ONCE_SECONDS = 24 * 3600  # how long a used form key is remembered


def admin_workspace(request: HttpRequest, slug: str) -> Workspace:
    """The workspace, if the person is its admin: 404 when they hold no role in it (it is not
    revealed to exist), 403 when they hold another role."""
    roles = workspace_roles(request.user)
    if slug not in roles:
        raise Http404("no such workspace")
    if not allows(roles[slug], "administer"):
        raise PermissionDenied(f"managing {slug} needs its admin role")
    # With what its health shows, so the workspace page reads it once.
    workspace = (
        Workspace.objects.filter(slug=slug).select_related("lease", "policy", "replica").first()
    )
    if workspace is None:
        raise Http404("no such workspace")
    return workspace


# --- reads ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Health:
    """What an admin checks first: is a worker serving it, is work piling up, is it hearing."""

    holder: str
    heartbeat: datetime | None
    live: bool
    pending: int
    ambiguous: int
    dead: int
    waiting: int  # inbound events not yet applied
    last_signal: datetime | None
    last_delivery: datetime | None
    policy: str  # the current policy's digest, or "" for the default


def workspace_health(workspaces: list[Workspace]) -> dict[str, Health]:
    """The health of each workspace, by slug, in four queries whatever their number (the
    workspaces come with ``select_related("lease", "policy")``)."""
    slugs = [w.slug for w in workspaces]
    operations = operation_counts(slugs)
    waiting = dict(
        InboundEvent.objects.filter(workspace__in=workspaces, state=InboundEvent.State.PENDING)
        .values_list("workspace__slug")
        .annotate(n=Count("pk"))
    )
    signals = dict(
        IngestedSignal.objects.filter(workspace__in=workspaces)
        .values_list("workspace__slug")
        .annotate(last=Max("received_at"))
    )
    deliveries = dict(
        WebhookDelivery.objects.filter(workspace__in=workspaces)
        .values_list("workspace__slug")
        .annotate(last=Max("received_at"))
    )
    now = timezone.now()
    health = {}
    for workspace in workspaces:
        lease = getattr(workspace, "lease", None)  # none until a worker first takes it
        counts = operations.get(workspace.slug, {})
        live = bool(lease and lease.owner and lease.expires_at and lease.expires_at > now)
        health[workspace.slug] = Health(
            holder=lease.owner if lease else "",
            heartbeat=lease.heartbeat_at if lease else None,
            live=live,
            pending=counts.get(Operation.State.PENDING, 0),
            ambiguous=counts.get(Operation.State.AMBIGUOUS, 0),
            dead=counts.get(Operation.State.DEAD, 0),
            waiting=waiting.get(workspace.slug, 0),
            last_signal=signals.get(workspace.slug),
            last_delivery=deliveries.get(workspace.slug),
            policy=workspace.policy.digest if workspace.policy_id else "",
        )
    return health


def _workspaces(slugs) -> list[Workspace]:
    return list(
        Workspace.objects.filter(slug__in=slugs).select_related("lease", "policy").order_by("slug")
    )


def role_holders(workspace: Workspace) -> dict[str, list[str]]:
    """Who holds each role in the workspace, in one query; superusers hold every role."""
    names = {group_name(workspace, role): role for role in Role}
    holders: dict[str, list[str]] = {str(role): [] for role in Role}
    superusers = set()
    people = (
        get_user_model()
        .objects.filter(Q(groups__name__in=names) | Q(is_superuser=True), is_active=True)
        .values_list("username", "is_superuser", "groups__name")
        .order_by("username")
    )
    for username, superuser, group in people:
        if superuser:
            superusers.add(username)
        elif group in names and username not in holders[names[group]]:
            holders[names[group]].append(username)
    holders["superusers"] = sorted(superusers)
    return holders


def _workspace_context(request: HttpRequest, workspace: Workspace, **extra) -> dict:
    """The workspace page (``workspace`` as ``admin_workspace`` read it): a fixed number of
    queries whatever the number of tokens, hooks and people."""
    tokens = list(IngestToken.objects.filter(workspace=workspace).order_by("-active", "-pk"))
    hooks = list(
        Hook.objects.filter(workspace=workspace)
        .annotate(last_delivery=Max("deliveries__received_at"))
        .order_by("kind")
    )
    for hook in hooks:
        hook.workspace = workspace  # read once above, not once per hook
        hook.endpoint = request.build_absolute_uri(hook_endpoint(hook))
        hook.hint = hook_secret_hint(hook)
    taken = {hook.kind for hook in hooks}
    return {
        "section": "workspaces",
        "workspace": workspace,
        "health": workspace_health([workspace])[workspace.slug],
        "replica": _replica(workspace),
        "open_proposal": PolicyProposal.objects.filter(
            workspace=workspace, state=PolicyProposal.State.OPEN
        ).exists(),
        "tokens": tokens,
        "hooks": hooks,
        "free_kinds": [(k, name) for k, name in Hook.Kind.choices if k not in taken],
        "roles": role_holders(workspace),
        "key": _fresh_key(),
        # Exporters append v1/logs and v1/traces to OTEL_EXPORTER_OTLP_ENDPOINT themselves.
        "otlp_endpoint": request.build_absolute_uri("/"),
        **extra,
    }


def _replica(workspace: Workspace) -> JournalReplica | None:
    """How far the journal remote is confirmed (read with the workspace), or None."""
    try:
        return workspace.replica
    except JournalReplica.DoesNotExist:
        return None


def _fresh_key() -> str:
    return uuid.uuid4().hex


def _once(form: OnceForm) -> bool:
    """True the first time this form's key is used (a second submission finds it taken)."""
    return cache.add(f"ephyra:form-once:{form.cleaned_data['key']}", 1, ONCE_SECONDS)


def _back(slug: str, outcome: str) -> HttpResponse:
    response = redirect(reverse("inbox:workspace", args=[slug]))
    response.status_code = 303
    response["X-Ephyra-Outcome"] = outcome
    return response


def _shown_once(request: HttpRequest, workspace: Workspace, **secret) -> HttpResponse:
    context = _workspace_context(request, workspace, **secret)
    response = render(request, "inbox/workspace.html", context, status=201)
    response["Cache-Control"] = "no-store"
    response["X-Ephyra-Outcome"] = "applied"
    return response


# --- pages ----------------------------------------------------------------------------------


@login_required
@require_GET
def workspaces(request: HttpRequest) -> HttpResponse:
    return render(request, "inbox/workspaces.html", _list_context(request, WorkspaceAddForm()))


def _list_context(request: HttpRequest, form: WorkspaceAddForm) -> dict:
    roles = workspace_roles(request.user)
    rows = _workspaces(roles)
    health = workspace_health(rows)
    return {
        "section": "workspaces",
        "rows": [
            (w, health[w.slug], sorted(roles[w.slug]), allows(roles[w.slug], "administer"))
            for w in rows
        ],
        "may_add": request.user.has_perm("quests.add_workspace"),
        "form": form,
    }


@login_required
@require_POST
def workspace_add_view(request: HttpRequest) -> HttpResponse:
    """Add a workspace through ``workspace_add``: 403 without the permission, 400 with the
    refusal on the form (nothing is left behind), 303 to the new workspace's page."""
    if not request.user.has_perm("quests.add_workspace"):
        raise PermissionDenied("adding a workspace needs a superuser or quests.add_workspace")
    form = WorkspaceAddForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            workspace = workspace_add(
                request.user,
                data["slug"],
                data["source"].strip(),
                base_branch=data["base_branch"].strip(),
                name=data["name"],
            )
        except ValueError as refused:
            form.add_error(None, str(refused))
        else:
            messages.success(
                request,
                f"Workspace {workspace.slug} is added: {workspace.remote} mirrored, base branch "
                f"{workspace.base_branch}. Next: an ingest token, a forge hook, and roles.",
            )
            return _back(workspace.slug, "applied")
    return render(request, "inbox/workspaces.html", _list_context(request, form), status=400)


@login_required
@require_GET
def workspace(request: HttpRequest, slug: str) -> HttpResponse:
    found = admin_workspace(request, slug)
    return render(request, "inbox/workspace.html", _workspace_context(request, found))


@login_required
@require_POST
def token_create_view(request: HttpRequest, slug: str) -> HttpResponse:
    found = admin_workspace(request, slug)
    form = TokenCreateForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not made: the form was not complete; try again.")
        return _back(slug, "invalid")
    if not _once(form):
        messages.error(request, _USED)
        return _back(slug, "refused")
    row, token = token_issue(request.user, found, name=form.cleaned_data["name"])
    return _shown_once(request, found, new_token=token, new_token_row=row)


_USED = (
    "Not made: this form was already sent once. A secret is shown only once; if you did not "
    "copy it, revoke or remove it and make another."
)


@login_required
@require_POST
def token_revoke_view(request: HttpRequest, slug: str, token_id: int) -> HttpResponse:
    found = admin_workspace(request, slug)
    row = IngestToken.objects.filter(workspace=found, pk=token_id).first()
    if row is None:
        raise Http404("no such token in this workspace")
    try:
        token_revoke(request.user, row)
    except ValueError as refused:
        messages.error(request, f"Not revoked: {refused}.")
        return _back(slug, "refused")
    messages.success(request, f"Revoked the token {row.prefix}…: exports bearing it get 401 now.")
    return _back(slug, "applied")


@login_required
@require_POST
def hook_create_view(request: HttpRequest, slug: str) -> HttpResponse:
    found = admin_workspace(request, slug)
    form = HookCreateForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not registered: choose one of the forges.")
        return _back(slug, "invalid")
    if not _once(form):
        messages.error(request, _USED)
        return _back(slug, "refused")
    try:
        hook, secret = hook_register(request.user, found, form.cleaned_data["kind"])
    except ValueError as refused:
        messages.error(request, f"Not registered: {refused}.")
        return _back(slug, "refused")
    endpoint = request.build_absolute_uri(hook_endpoint(hook))
    return _shown_once(request, found, new_hook=hook, new_secret=secret, new_hook_endpoint=endpoint)


def _hook(workspace: Workspace, kind: str) -> Hook:
    hook = Hook.objects.filter(workspace=workspace, kind=kind).first()
    if hook is None:
        raise Http404("no such hook in this workspace")
    hook.workspace = workspace
    return hook


@login_required
@require_POST
def hook_change_view(request: HttpRequest, slug: str, kind: str, change: str) -> HttpResponse:
    """Disable, enable or remove a hook."""
    found = admin_workspace(request, slug)
    hook = _hook(found, kind)
    label = hook.get_kind_display()
    try:
        if change == "remove":
            hook_remove(request.user, hook)
            done = f"Removed the {label} hook; its deliveries are kept."
        else:
            hook_set_enabled(request.user, hook, change == "enable")
            done = (
                f"Enabled the {label} hook."
                if change == "enable"
                else f"Disabled the {label} hook: its deliveries get 404 until it is enabled."
            )
    except ValueError as refused:
        messages.error(request, f"Not done: {refused}.")
        return _back(slug, "refused")
    messages.success(request, done)
    return _back(slug, "applied")
