"""The policy page of a workspace (its admins only): the current policy and every version, a
diff between any two, an editor that checks a text exactly as the worker parses it, and the
four-eyes steps (propose, approve, reject, withdraw, roll back) through ``quests.policies``.

Versions are numbered 1, 2, … in the order they were stored; ``?diff=<a>..<b>`` compares two
of them, ``?show=<n>`` shows one. Every action is a plain POST answered with a redirect to the
page (303, its message saying what came of it, ``X-Ephyra-Outcome`` too), except a proposed
text that is refused: the page comes back with the text kept and each problem listed. An
admin approving their own proposal is refused with 403 and the reason.
"""

from __future__ import annotations

import difflib
import re
from collections import defaultdict
from dataclasses import dataclass, field

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ephyra.policy import DEFAULT_POLICY_PATH, PolicyError, parse_policy
from inbox.forms import PolicyDecisionForm, PolicyEditForm, PolicyVersionForm
from inbox.workspace_views import admin_workspace
from quests.models import PolicyProposal, PolicyVersion, Workspace
from quests.policies import (
    PolicyRefused,
    policy_approve,
    policy_propose,
    policy_propose_version,
    policy_reject,
    policy_withdraw,
)


@dataclass
class VersionRow:
    number: int
    version: PolicyVersion
    current: bool
    proposals: list[PolicyProposal] = field(default_factory=list)


@dataclass(frozen=True)
class Problem:
    """One problem of a policy text, as ``line: field: message``."""

    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.line if self.line is not None else '?'}: {self.path}: {self.message}"


class BadQuery(ValueError):
    """A ``?diff=`` or ``?show=`` that names no version: said on the page, with status 400."""


def problems_of(text: str) -> list[Problem]:
    """Every problem the worker's parser finds in ``text`` (none: the text is a policy)."""
    try:
        parse_policy(text, source="policy")
    except PolicyError as invalid:
        return _problems(invalid)
    return []


def _problems(invalid: PolicyError) -> list[Problem]:
    return [Problem(line, path or "(top)", message) for path, line, message in invalid.problems]


def numbered(text: str, marked: frozenset[int] = frozenset()) -> list[tuple[int, str, bool]]:
    """The text's lines with their numbers, each flagged when a problem names it (the end of
    the last line is not a line of its own)."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return [(n, line, n in marked) for n, line in enumerate(lines, 1)]


def diff_lines(old: str, new: str, old_name: str, new_name: str) -> list[tuple[str, str]]:
    """A unified diff as (kind, line) pairs for the template, which escapes each line: kind is
    "file", "hunk", "added", "removed" or "" (context)."""
    lines = []
    for line in difflib.unified_diff(
        old.splitlines(), new.splitlines(), old_name, new_name, n=3, lineterm=""
    ):
        if line.startswith(("---", "+++")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "added"
        elif line.startswith("-"):
            kind = "removed"
        else:
            kind = ""
        lines.append((kind, line))
    return lines


def _number(value: str, count: int, what: str) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", value):
        raise BadQuery(f"{what}: {value[:40]!r} is not a version number")
    number = int(value)
    if not 1 <= number <= count:
        has = f"versions 1 to {count}" if count else "no versions yet"
        raise BadQuery(f"{what}: there is no version {number}; this workspace has {has}")
    return number


def _page(
    request: HttpRequest,
    workspace: Workspace,
    *,
    diff: str = "",
    show: str = "",
    edit: str | None = None,
    note: str = "",
    problems: list[Problem] | None = None,
    checked: bool = False,
    refusal: str = "",
) -> dict:
    """Everything the page shows, read in a fixed number of queries: the versions (without
    their texts), the proposals with their people, and the texts the page prints."""
    versions = list(PolicyVersion.objects.filter(workspace=workspace).order_by("pk").defer("text"))
    proposals = list(
        PolicyProposal.objects.filter(workspace=workspace)
        .select_related("proposed_by", "decided_by")
        .order_by("-pk")
    )
    by_version: dict[int, list[PolicyProposal]] = defaultdict(list)
    for proposal in proposals:
        by_version[proposal.version_id].append(proposal)
    rows = [
        VersionRow(n, v, v.pk == workspace.policy_id, by_version[v.pk])
        for n, v in enumerate(versions, 1)
    ]
    by_pk = {row.version.pk: row for row in rows}
    current = by_pk.get(workspace.policy_id) if workspace.policy_id else None
    waiting = next((p for p in proposals if p.state == PolicyProposal.State.OPEN), None)
    approval = current and next(
        (p for p in current.proposals if p.state == PolicyProposal.State.APPROVED), None
    )

    errors = []
    pair = shown = None
    if diff:
        try:
            a, _, b = diff.partition("..")
            if not b:
                raise BadQuery("diff: write it as ?diff=<a>..<b>, two version numbers")
            pair = (
                rows[_number(a, len(rows), "diff") - 1],
                rows[_number(b, len(rows), "diff") - 1],
            )
        except BadQuery as bad:
            errors.append(str(bad))
    if show:
        try:
            shown = rows[_number(show, len(rows), "show") - 1]
        except BadQuery as bad:
            errors.append(str(bad))

    wanted = {row.version.pk for row in (current, shown, *(pair or ())) if row is not None}
    if waiting is not None:
        wanted.add(waiting.version_id)
    texts = dict(PolicyVersion.objects.filter(pk__in=wanted).values_list("pk", "text"))
    default_text = DEFAULT_POLICY_PATH.read_text(encoding="utf-8")
    current_text = texts[current.version.pk] if current else default_text

    def name(row: VersionRow | None) -> str:
        return f"version {row.number} ({row.version.digest[7:19]})" if row else "the default"

    context = {
        "section": "workspaces",
        "workspace": workspace,
        "rows": list(reversed(rows)),  # newest first
        "current": current,
        "approval": approval,
        "current_lines": numbered(current_text),
        "waiting": waiting,
        "mine": waiting is not None and waiting.proposed_by_id == request.user.pk,
        "query_errors": errors,
        "diff_form": {"a": pair[0].number if pair else "", "b": pair[1].number if pair else ""},
    }
    if waiting is not None:
        proposed = by_pk[waiting.version_id]
        context["waiting_row"] = proposed
        context["waiting_diff"] = diff_lines(
            current_text, texts[waiting.version_id], name(current), name(proposed)
        )
    if pair is not None:
        old, new = pair
        context["diff"] = diff_lines(
            texts[old.version.pk], texts[new.version.pk], name(old), name(new)
        )
        context["diff_pair"] = pair
    if shown is not None:
        context["shown"] = shown
        context["shown_lines"] = numbered(texts[shown.version.pk])
    text = current_text if edit is None else edit
    context["edit"] = {
        "text": text,
        "note": note,
        "rows": min(60, max(16, text.count("\n") + 4)),
        "problems": problems or [],
        "checked": checked,
        "refusal": refusal,
        "lines": numbered(text, frozenset(p.line for p in problems or () if p.line)),
    }
    return context


def _back(slug: str, outcome: str) -> HttpResponse:
    response = redirect(reverse("inbox:policy", args=[slug]))
    response.status_code = 303
    response["X-Ephyra-Outcome"] = outcome
    return response


def _proposal(workspace: Workspace, proposal_id: int) -> PolicyProposal:
    proposal = (
        PolicyProposal.objects.select_related("workspace", "version", "proposed_by")
        .filter(workspace=workspace, pk=proposal_id)
        .first()
    )
    if proposal is None:
        raise Http404("no such proposal in this workspace")
    return proposal


@login_required
@require_GET
def policy(request: HttpRequest, slug: str) -> HttpResponse:
    workspace = admin_workspace(request, slug)
    diff = request.GET.get("diff", "")
    if not diff and request.GET.get("a") and request.GET.get("b"):  # the diff form's fields
        diff = f"{request.GET['a']}..{request.GET['b']}"
    context = _page(request, workspace, diff=diff, show=request.GET.get("show", ""))
    return render(
        request, "inbox/policy.html", context, status=400 if context["query_errors"] else 200
    )


@login_required
@require_POST
def policy_propose_text(request: HttpRequest, slug: str) -> HttpResponse:
    """Check a text (``intent=check``: nothing is stored) or propose it. Answers 200 for a
    check, 303 for a proposal made, 400 with every problem for a text that is not a policy,
    409 when the proposal is refused (one is already open, the text is already current)."""
    workspace = admin_workspace(request, slug)
    form = PolicyEditForm(request.POST)
    if not form.is_valid():
        problems = [
            Problem(None, name if name != "__all__" else "(form)", error)
            for name, errors in form.errors.items()
            for error in errors
        ]
        context = _page(
            request, workspace, edit=request.POST.get("text", ""), problems=problems, checked=True
        )
        return render(request, "inbox/policy.html", context, status=400)
    text, note = form.cleaned_data["text"], form.cleaned_data["note"]
    if form.cleaned_data["intent"] == "check":
        context = _page(
            request, workspace, edit=text, note=note, problems=problems_of(text), checked=True
        )
        template = "inbox/_policy_check.html" if request.htmx else "inbox/policy.html"
        return render(request, template, context)
    try:
        proposal = policy_propose(request.user, workspace, text, note)
    except PolicyError as invalid:
        context = _page(
            request, workspace, edit=text, note=note, problems=_problems(invalid), checked=True
        )
        return render(request, "inbox/policy.html", context, status=400)
    except PolicyRefused as refused:
        context = _page(request, workspace, edit=text, note=note, refusal=str(refused))
        return render(request, "inbox/policy.html", context, status=409)
    messages.success(
        request,
        f"Proposed (#{proposal.pk}): another admin of {slug} approves or rejects it; until then "
        "the workers keep the current policy.",
    )
    return _back(slug, "applied")


@login_required
@require_POST
def policy_propose_earlier(request: HttpRequest, slug: str) -> HttpResponse:
    """Propose a stored version as current again (a roll back), approved like any proposal."""
    workspace = admin_workspace(request, slug)
    form = PolicyVersionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not proposed: name the version to propose.")
        return _back(slug, "invalid")
    version = PolicyVersion.objects.filter(
        workspace=workspace, pk=form.cleaned_data["version"]
    ).first()
    if version is None:
        raise Http404("no such version in this workspace")
    try:
        proposal = policy_propose_version(request.user, version, form.cleaned_data["note"])
    except PolicyRefused as refused:
        messages.error(request, f"Not proposed: {refused}.")
        return _back(slug, "refused")
    messages.success(
        request,
        f"Proposed (#{proposal.pk}) to go back to {version.digest[:19]}…: another admin of "
        f"{slug} approves or rejects it.",
    )
    return _back(slug, "applied")


@login_required
@require_POST
def policy_approve_proposal(request: HttpRequest, slug: str, proposal_id: int) -> HttpResponse:
    workspace = admin_workspace(request, slug)
    proposal = _proposal(workspace, proposal_id)
    try:
        policy_approve(request.user, proposal)  # OwnProposal is a PermissionDenied: 403
    except PolicyRefused as refused:
        messages.error(request, f"Not approved: {refused}.")
        return _back(slug, "refused")
    messages.success(
        request,
        f"Approved: {proposal.version.digest[:19]}… is now the policy of {slug}; the workers "
        "load it with their next batch of events.",
    )
    return _back(slug, "applied")


@login_required
@require_POST
def policy_reject_proposal(request: HttpRequest, slug: str, proposal_id: int) -> HttpResponse:
    workspace = admin_workspace(request, slug)
    proposal = _proposal(workspace, proposal_id)
    form = PolicyDecisionForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Not rejected: {_first_error(form)}")
        return _back(slug, "invalid")
    try:
        policy_reject(request.user, proposal, form.cleaned_data["reason"])
    except PolicyRefused as refused:
        messages.error(request, f"Not rejected: {refused}.")
        return _back(slug, "refused")
    messages.success(request, f"Rejected proposal #{proposal.pk}; the current policy stays.")
    return _back(slug, "applied")


@login_required
@require_POST
def policy_withdraw_proposal(request: HttpRequest, slug: str, proposal_id: int) -> HttpResponse:
    workspace = admin_workspace(request, slug)
    proposal = _proposal(workspace, proposal_id)
    form = PolicyDecisionForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Not withdrawn: {_first_error(form)}")
        return _back(slug, "invalid")
    try:
        policy_withdraw(request.user, proposal, form.cleaned_data["reason"])
    except PolicyRefused as refused:
        messages.error(request, f"Not withdrawn: {refused}.")
        return _back(slug, "refused")
    messages.success(request, f"Withdrew proposal #{proposal.pk}.")
    return _back(slug, "applied")


def _first_error(form) -> str:
    return next(f"{name}: {error}" for name, errors in form.errors.items() for error in errors)
