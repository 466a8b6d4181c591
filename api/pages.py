"""The dashboard's "API tokens" page: a person's own tokens, a form to make one (shown once),
and revoking one. Plain POST forms, as every page of the dashboard."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from api.models import ApiToken
from api.tokens import DEFAULT_DAYS, MAX_DAYS, TokenRefused, token_create, token_revoke, tokens_of
from quests.roles import Role, workspace_roles


class TokenForm(forms.Form):
    name = forms.CharField(required=False, max_length=100)
    workspaces = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)
    role = forms.ChoiceField(choices=[(r.value, r.value) for r in Role])
    days = forms.IntegerField(min_value=1, max_value=MAX_DAYS, initial=DEFAULT_DAYS)

    def __init__(self, data=None, *, workspaces: list[str]) -> None:
        super().__init__(data)
        self.fields["workspaces"].choices = [(s, s) for s in workspaces]


def _page(request: HttpRequest, form: TokenForm, *, issued=None, status: int = 200):
    now = timezone.now()
    rows = [
        {
            "token": t,
            "state": "revoked" if t.revoked_at else ("expired" if t.expires_at <= now else "live"),
        }
        for t in tokens_of(request.user)
    ]
    context = {
        "section": "tokens",
        "form": form,
        "rows": rows,
        "issued": issued,
        "api_base": request.build_absolute_uri("/api/v1/"),
        "max_days": MAX_DAYS,
    }
    return render(request, "api/tokens.html", context, status=status)


@login_required
@require_GET
def tokens(request: HttpRequest) -> HttpResponse:
    form = TokenForm(workspaces=sorted(workspace_roles(request.user)))
    return _page(request, form)


@login_required
@require_POST
def token_new(request: HttpRequest) -> HttpResponse:
    """Make a token; the answer (201) shows it this once. A refusal (400) says why."""
    form = TokenForm(request.POST, workspaces=sorted(workspace_roles(request.user)))
    if not form.is_valid():
        errors = "; ".join(f"{name}: {e}" for name, errs in form.errors.items() for e in errs)
        messages.error(request, f"Not made: {errors}")
        return _page(request, form, status=400)
    data = form.cleaned_data
    try:
        issued = token_create(
            request.user,
            workspaces=data["workspaces"],
            role=data["role"],
            days=data["days"],
            name=data["name"],
        )
    except TokenRefused as exc:
        messages.error(request, f"Not made: {exc}")
        return _page(request, form, status=400)
    blank = TokenForm(workspaces=sorted(workspace_roles(request.user)))
    return _page(request, blank, issued=issued, status=201)


@login_required
@require_POST
def token_revoke_view(request: HttpRequest, prefix: str) -> HttpResponse:
    row = ApiToken.objects.filter(prefix=prefix, user=request.user).first()
    if row is None:
        raise Http404("no such token")
    try:
        token_revoke(request.user, row)
        messages.success(
            request, f"The token {row.prefix}… is revoked: it answers 401 from now on."
        )
    except TokenRefused as exc:
        messages.error(request, f"Not done: {exc}")
    response = redirect(reverse("api_pages:tokens"))
    response.status_code = 303
    return response
