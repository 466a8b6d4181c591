"""The ledger page: the operations of the workspaces a person may read, and an admin's verdict
on an ambiguous or dead one.

Every person with a role reads the ledger of their workspaces; only an admin of an operation's
workspace is offered the form that settles it, and a forged POST from anyone else is a 403 (an
operation of a workspace the person holds no role in is a 404, as if it did not exist). The
verdict goes through the action layer (``quests.actions.operation_resolve``) to the
workspace's worker, which applies and audits it. Without JavaScript the form is a plain POST
and redirect; with htmx it swaps the page's live region.
"""

from __future__ import annotations

import json
import uuid

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ephyra.core.effects import EffectType
from ledger.models import Operation
from ledger.selectors import LedgerFilters, ledger_page, operation_of, operation_totals
from quests import actions
from quests.actions import COMMENT_LIMIT, RESOLUTIONS, RESOLVABLE, ActionError
from quests.roles import ALLOWED, require, workspace_roles

VERDICTS = {
    "succeeded": "It happened (succeeded)",
    "failed": "It did not happen, and must not be tried again (failed)",
    "absent": "It did not happen: deliver it again (absent)",
}


class LedgerFilterForm(forms.Form):
    workspace = forms.ChoiceField(required=False)
    state = forms.ChoiceField(choices=[("", "any"), *Operation.State.choices], required=False)
    type = forms.ChoiceField(
        choices=[("", "any"), *((str(t), str(t)) for t in EffectType)], required=False
    )
    quest = forms.CharField(required=False, max_length=128)

    def __init__(self, data, *, workspaces: list[str]) -> None:
        super().__init__(data)
        self.fields["workspace"].choices = [("", "any"), *((s, s) for s in workspaces)]


class ResolveForm(forms.Form):
    """An admin's verdict on one operation. ``token`` is the form's one-time idempotency key;
    ``back`` is the ledger's query string to return to."""

    workspace = forms.CharField(max_length=64)
    key = forms.CharField(max_length=400)
    verdict = forms.ChoiceField(choices=[(v, VERDICTS[v]) for v in RESOLUTIONS])
    note = forms.CharField(max_length=COMMENT_LIMIT, strip=True)
    token = forms.CharField(max_length=200)
    back = forms.CharField(max_length=2000, required=False)


def _details(op: Operation) -> dict:
    """What is known of an operation that waits for a person, ready to show."""
    outcome = op.outcome or {}
    return {
        "request": json.dumps(op.payload, indent=2, sort_keys=True),
        "error": outcome.get("error", ""),
        "check": outcome.get("check"),
        "outcome": json.dumps(outcome, indent=2, sort_keys=True),
    }


def _context(request: HttpRequest, query: QueryDict) -> tuple[dict, int]:
    """The ledger's context for ``query`` (the filters), and the status to answer with: 400
    when a filter was not understood (the others still apply, and the errors say which)."""
    roles = workspace_roles(request.user)
    slugs = sorted(roles)
    resolvers = {slug for slug, held in roles.items() if held & ALLOWED["administer"]}
    form = LedgerFilterForm(query, workspaces=slugs)
    valid = form.is_valid()
    data = form.cleaned_data
    filters = LedgerFilters(
        workspace=data.get("workspace", ""),
        state=data.get("state", ""),
        type=data.get("type", ""),
        quest=data.get("quest", ""),
    )
    page = ledger_page(slugs, filters, query.get("page") or 1)
    totals = operation_totals([filters.workspace] if filters.workspace else slugs)
    kept = query.copy()
    kept.pop("page", None)
    by_state = query.copy()
    for name in ("page", "state"):
        by_state.pop(name, None)
    rows = [
        {
            "op": op,
            "waits": op.state in RESOLVABLE,
            "details": _details(op) if op.state in RESOLVABLE else None,
            "may_resolve": op.state in RESOLVABLE and op.workspace.slug in resolvers,
        }
        for op in page
    ]
    context = {
        "section": "ledger",
        "form": form,
        "filters": filters,
        "page": page,
        "rows": rows,
        "totals": totals,
        "total": sum(totals.values()),
        "states": Operation.State.values,
        "query": kept.urlencode(),
        "by_state": by_state.urlencode(),
        "verdicts": VERDICTS,
        "form_token": uuid.uuid4().hex,
        "note_limit": COMMENT_LIMIT,
    }
    return context, 200 if valid else 400


@login_required
@require_GET
def ledger(request: HttpRequest) -> HttpResponse:
    context, status = _context(request, request.GET)
    template = "inbox/_ledger_live.html" if request.htmx else "inbox/ledger.html"
    return render(request, template, context, status=status)


@login_required
@require_POST
def ledger_resolve(request: HttpRequest) -> HttpResponse:
    """An admin's verdict on an ambiguous or dead operation, through the action layer. Without
    htmx: a message and a 303 back to the ledger as it was filtered; with htmx: the ledger's
    live region, fresh. ``X-Ephyra-Outcome`` says what came of it (applied, queued, refused,
    invalid) and the message says why."""
    roles = workspace_roles(request.user)
    op = operation_of(sorted(roles), request.POST.get("workspace", ""), request.POST.get("key", ""))
    if op is None:
        raise Http404("no such operation")
    require(request.user, op.workspace, "administer")  # a forged form from a reader: 403
    form = ResolveForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(
            f"{name}: {error}" if name != "__all__" else error
            for name, errs in form.errors.items()
            for error in errs
        )
        messages.error(request, f"Not done: {errors}")
        outcome = "invalid"
    else:
        outcome = _resolve(request, op, form.cleaned_data)
    back = QueryDict(request.POST.get("back", ""))
    if request.htmx:
        context, _ = _context(request, back)  # a filter it could not use is said on the page
        response = render(request, "inbox/_ledger_live.html", context)
    else:
        query = back.urlencode()
        response = redirect(reverse("inbox:ledger") + (f"?{query}" if query else ""))
        response.status_code = 303
    response["X-Ephyra-Outcome"] = outcome
    return response


def _resolve(request: HttpRequest, op: Operation, data: dict) -> str:
    try:
        resolution = actions.operation_resolve(
            request.user, op, verdict=data["verdict"], note=data["note"], key=data["token"]
        )
    except ActionError as exc:
        messages.error(request, f"Not done: {exc}")
        return "refused"
    outcome = resolution.outcome
    if outcome == "applied":
        messages.success(
            request, f"Resolved {op.key} as {resolution.verdict}: it is now {resolution.state}."
        )
    elif outcome == "queued":
        messages.info(
            request,
            f"Queued: the worker of {op.workspace.slug} applies your verdict on {op.key} "
            "in a moment.",
        )
    else:
        messages.error(request, f"Not done: {resolution.reason}")
    return outcome
