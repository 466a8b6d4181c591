"""The audit trail: the hash-chained entries of a person's workspaces, and a button that
verifies a workspace's chain the way ``manage.py audit verify`` does.

Admins and staff read it (the role action "audit"), each the workspaces they hold one of those
roles in; anyone else is answered 403. Verifying a workspace the person holds no role in is a
404, as if it did not exist. Without JavaScript the button is a plain POST and redirect; with
htmx it swaps the page's live region, where the result appears as a message.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ledger.audit import AuditCheck, audit_check
from ledger.selectors import AuditFilters, audit_page
from quests.roles import ALLOWED, require, workspace_roles
from quests.selectors import workspaces_for

QUEST, OPERATION = "quest:", "operation:"


class AuditFilterForm(forms.Form):
    workspace = forms.ChoiceField(required=False)
    actor = forms.CharField(required=False, max_length=200)
    action = forms.CharField(required=False, max_length=100, label="Action (kind)")
    quest = forms.CharField(required=False, max_length=128)
    since = forms.DateField(required=False, label="Since (day, UTC)")
    until = forms.DateField(required=False, label="Until (day, UTC, included)")

    def __init__(self, data, *, workspaces: list[str]) -> None:
        super().__init__(data)
        self.fields["workspace"].choices = [("", "any"), *((s, s) for s in workspaces)]

    def clean(self):
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and until < since:
            self.add_error("until", "the range ends before it starts")
        return data


def _auditable(user) -> list[str]:
    """The workspaces whose audit trail ``user`` may read; PermissionDenied when none."""
    roles = workspace_roles(user)
    slugs = sorted(slug for slug, held in roles.items() if held & ALLOWED["audit"])
    if not slugs:
        raise PermissionDenied("The audit trail is for the admins and staff of a workspace.")
    return slugs


def _day(value, *, after: bool = False) -> datetime | None:
    """The start of a day in UTC (of the next one, ``after``, for a range that includes it)."""
    if value is None:
        return None
    return datetime.combine(value + timedelta(days=1 if after else 0), time.min, tzinfo=UTC)


def _context(request: HttpRequest, query: QueryDict) -> tuple[dict, int]:
    """The trail's context for ``query`` (the filters), and the status to answer with: 400
    when a filter was not understood (the others still apply, and the errors say which)."""
    slugs = _auditable(request.user)
    form = AuditFilterForm(query, workspaces=slugs)
    valid = form.is_valid()
    data = form.cleaned_data
    filters = AuditFilters(
        workspace=data.get("workspace", ""),
        actor=data.get("actor", ""),
        action=data.get("action", ""),
        quest=data.get("quest", ""),
        since=_day(data.get("since")),
        until=_day(data.get("until"), after=True),
    )
    page = audit_page(slugs, filters, query.get("page") or 1)
    kept = query.copy()
    kept.pop("page", None)
    rows = [
        {"entry": e, "quest": _quest_of(e), "operation": e.object.startswith(OPERATION)}
        for e in page
    ]
    context = {
        "section": "audit",
        "form": form,
        "page": page,
        "rows": rows,
        "workspaces": slugs,
        "query": kept.urlencode(),
    }
    return context, 200 if valid else 400


def _quest_of(entry) -> str:
    """The quest an entry is about: its object's (``quest:<id>``), or an operation's quest."""
    if entry.object.startswith(QUEST):
        return entry.object[len(QUEST) :]
    if entry.object.startswith(OPERATION):
        return str(entry.payload.get("quest") or "")
    return ""


@login_required
@require_GET
def audit(request: HttpRequest) -> HttpResponse:
    context, status = _context(request, request.GET)
    template = "inbox/_audit_live.html" if request.htmx else "inbox/audit.html"
    return render(request, template, context, status=status)


@login_required
@require_POST
def audit_verify(request: HttpRequest) -> HttpResponse:
    """Verify one workspace's chain (``ledger.audit.audit_check``, as ``manage.py audit
    verify`` does) and say what was found as a message. ``X-Ephyra-Outcome`` is verified or
    broken."""
    slug = request.POST.get("workspace", "")
    found = [w for w in workspaces_for(request.user) if w.slug == slug]
    if not found:
        raise Http404("no such workspace")
    workspace = found[0]
    require(request.user, workspace, "audit")
    check = audit_check(workspace)
    if check.ok:
        messages.success(request, _verified(check))
        outcome = "verified"
    else:
        messages.error(request, _broken(check))
        outcome = "broken"
    back = QueryDict(request.POST.get("back", ""))
    if request.htmx:
        context, _ = _context(request, back)
        response = render(request, "inbox/_audit_live.html", context)
    else:
        query = back.urlencode()
        response = redirect(reverse("inbox:audit") + (f"?{query}" if query else ""))
        response.status_code = 303
    response["X-Ephyra-Outcome"] = outcome
    return response


def _verified(check: AuditCheck) -> str:
    where = f"anchored at #{check.anchor.sequence} in Git" if check.anchor else "not anchored yet"
    return f"{check.workspace}: verified {check.verified} entries, {where}."


def _broken(check: AuditCheck) -> str:
    if check.broken_at is None:
        return f"{check.workspace}: the chain could not be verified: {check.problem}"
    before = (
        f"the {check.verified} entries before it verify" if check.verified else "none before it"
    )
    return (
        f"{check.workspace}: the chain is broken at entry #{check.broken_at}: {check.problem} "
        f"({before})."
    )
