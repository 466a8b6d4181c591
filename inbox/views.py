"""The reviewer dashboard's pages: the inbox, a quest, an action on a quest, a source file.

Function views, one template per page; a region that htmx refreshes is a partial template the
view renders alone when ``request.htmx`` is set. Every page needs a login; a quest of a
workspace the person holds no role in is a 404, as if it did not exist. Every action works as
a plain POST and redirect without JavaScript; htmx only swaps the page's live region instead.
"""

from __future__ import annotations

import dataclasses
import uuid

import pygit2
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, guess_lexer_for_filename
from pygments.util import ClassNotFound

from inbox import quest_page
from inbox.forms import TABS, ActionForm, InboxFilterForm
from inbox.statepath import state_path_svg
from ledger.selectors import NEEDS_A_PERSON, operation_counts
from quests import actions
from quests.actions import ActionError, Seen, Stale
from quests.models import Quest, Workspace
from quests.roles import Role, allows, roles_of, workspace_roles
from quests.selectors import (
    InboxFilters,
    checkpoint_of,
    inbox_counts,
    inbox_page,
    quest_effects,
    quest_for,
    quest_timeline,
)

REFRESH_SECONDS = 15


@login_required
@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    form = InboxFilterForm(request.GET)
    data = form.cleaned_data if form.is_valid() else {}
    tab = data.get("tab") or "waiting"
    filters = InboxFilters(
        workspace=data.get("workspace", ""),
        state=data.get("state", ""),
        checkpoint=data.get("checkpoint", ""),
        at_checkpoint=tab == "checkpoint",
        severity=data.get("severity", ""),
        route=data.get("route", ""),
        mine=tab == "mine",
        unclaimed=bool(data.get("unclaimed")),
        text=data.get("q", ""),
        sort=data.get("sort") or "updated",
        waiting=tab != "all",
    )
    if tab in {"claimed", "mine"}:
        filters = _replace(filters, state="handed_off")
    elif tab == "parked":
        filters = _replace(filters, state="parked")
    page = inbox_page(request.user, filters, request.GET.get("page") or 1)
    roles = workspace_roles(request.user)
    admin_of = [slug for slug, held in roles.items() if Role.ADMIN in held]
    needs_a_person = 0
    if admin_of:
        for counts in operation_counts(admin_of).values():
            needs_a_person += sum(counts.get(s, 0) for s in NEEDS_A_PERSON)
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "tab": tab,
        "tabs": TABS,
        "page": page,
        "rows": [(quest, checkpoint_of(quest)) for quest in page],
        "counts": inbox_counts(request.user),
        "workspaces": sorted(roles),
        "needs_a_person": needs_a_person,
        "query": query.urlencode(),
        "refresh": REFRESH_SECONDS,
    }
    template = "inbox/_inbox_live.html" if request.htmx else "inbox/inbox.html"
    return render(request, template, context)


def _replace(filters: InboxFilters, **changes) -> InboxFilters:
    return dataclasses.replace(filters, **changes)


def _quest_or_404(request: HttpRequest, slug: str, quest_id: str) -> Quest:
    quest = quest_for(request.user, slug, quest_id)
    if quest is None:
        raise Http404("no such quest")
    return quest


def _quest_context(request: HttpRequest, quest: Quest) -> dict:
    timeline = quest_timeline(quest)
    steps = quest_page.visited_states(timeline)
    workspace = quest.workspace
    commit = quest_page.browse_commit(quest)
    signals = quest_page.signals(quest)
    latest = signals[0] if signals else None
    frames = []
    if latest is not None:
        for frame in latest.frames:
            path = commit and quest_page.repository_path(quest, frame.get("file", ""), commit)
            frames.append({**frame, "repo_path": path})
    roles = roles_of(request.user, workspace)
    offers = quest_page.offers(request.user, roles, quest)
    return {
        "quest": quest,
        "workspace": workspace,
        "checkpoint": checkpoint_of(quest),
        "timeline": timeline,
        "comments": [t for t in timeline if t.type == "comment_added" and t.outcome == "accepted"],
        "path_svg": state_path_svg(steps, quest.state),
        "signals": signals,
        "latest": latest,
        "frames": frames,
        "browse_commit": commit,
        "patch": quest_page.patch(quest),
        "proof": quest_page.proof(quest),
        "effects": quest_effects(quest),
        "buttons": [o for o in offers if o.action != "decide"],
        "decisions": [o for o in offers if o.action == "decide"],
        "may_comment": allows(roles, "comment"),
        "form_key": uuid.uuid4().hex,
        "refresh": REFRESH_SECONDS,
    }


@login_required
@require_GET
def quest(request: HttpRequest, slug: str, quest_id: str) -> HttpResponse:
    found = _quest_or_404(request, slug, quest_id)
    template = "inbox/_quest_live.html" if request.htmx else "inbox/quest.html"
    return render(request, template, _quest_context(request, found))


ACTION_DONE = {
    "claim": "You hold the review.",
    "release": "The review is released.",
    "decide": "Your decision is recorded.",
    "comment": "Your comment is added.",
    "pause": "The quest is paused.",
    "resume": "The quest is resumed.",
    "kill": "The quest is killed.",
}


@login_required
@require_POST
def quest_act(request: HttpRequest, slug: str, quest_id: str) -> HttpResponse:
    """One action on a quest, through the action layer. Without htmx: a message and a
    redirect to the quest page (303, post/redirect/get). With htmx: the page's live region,
    fresh. Either way ``X-Ephyra-Outcome`` says what came of it (applied, queued, refused,
    stale, invalid) and the message says why."""
    found = _quest_or_404(request, slug, quest_id)
    form = ActionForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(e for errs in form.errors.values() for e in errs)
        messages.error(request, f"Not done: {errors}")
        outcome = "invalid"
    else:
        outcome = _perform(request, found, form.cleaned_data)
    if request.htmx:
        fresh = _quest_or_404(request, slug, quest_id)
        response = render(request, "inbox/_quest_live.html", _quest_context(request, fresh))
    else:
        response = redirect(reverse("inbox:quest", args=[slug, quest_id]))
        response.status_code = 303
    response["X-Ephyra-Outcome"] = outcome
    return response


def _perform(request: HttpRequest, quest: Quest, data: dict) -> str:
    user, action, key = request.user, data["action"], data["key"]
    seen = Seen(data.get("seen_head") or "", data.get("seen_revision") or 0)
    text = data.get("text", "")
    try:
        submitted = actions.quest_act(
            user, quest, action, seen=seen, key=key,
            checkpoint=data.get("checkpoint", ""), verdict=data.get("verdict", ""), text=text,
        )  # fmt: skip
    except PermissionDenied:
        raise
    except Stale as exc:
        messages.error(request, f"Not done: {exc}. The page now shows the quest as it is.")
        return "stale"
    except ActionError as exc:
        messages.error(request, f"Not done: {exc}")
        return "refused"
    submitted.wait(settings.EPHYRA_ACTION_WAIT_MS / 1000)
    if submitted.state == "applied":
        messages.success(request, ACTION_DONE[action])
        return "applied"
    if submitted.state == "pending":
        messages.info(request, "Queued: the workspace's worker applies it in a moment.")
        return "queued"
    messages.error(request, f"Not done: {submitted.reason}")
    return "stale" if submitted.row.result.get("stale") else "refused"


@login_required
@require_GET
def source(request: HttpRequest, slug: str, commit: str, path: str) -> HttpResponse:
    """A file of the workspace's repository at a commit, with line anchors (frames link here)."""
    if slug not in workspace_roles(request.user):
        raise Http404("no such workspace")
    workspace = Workspace.objects.get(slug=slug)
    try:
        repo = pygit2.Repository(workspace.repository)
        blob = repo.revparse_single(f"{commit}:{path}")
    except (KeyError, ValueError, pygit2.GitError):
        raise Http404("no such file at that commit") from None
    if not isinstance(blob, pygit2.Blob) or blob.is_binary or blob.size > 2_000_000:
        raise Http404("not a text file")
    text = blob.data.decode("utf-8", errors="replace")
    try:
        lexer = guess_lexer_for_filename(path, text)
    except ClassNotFound:
        lexer = TextLexer()
    formatter = HtmlFormatter(linenos="table", anchorlinenos=True, lineanchors="L")
    return render(
        request,
        "inbox/source.html",
        {
            "workspace": workspace,
            "commit": commit,
            "path": path,
            "code": highlight(text, lexer, formatter),  # Pygments escapes the text
            "line": request.GET.get("line", ""),
        },
    )
