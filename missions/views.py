"""The mission pages: the list, one mission (its board, ledger, people and history), and the
forms that change a mission, each a plain POST through ``missions.services``.

Function views, one template per page, the dashboard's look. Every page needs a login; a
mission of a workspace the person holds no role in is a 404, as if it did not exist. Each
action answers with a redirect to the mission page (303), its message saying what came of it
and ``X-Ephyra-Outcome`` too (applied, duplicate, refused, stale, invalid); a role the person
does not hold is 403; an evidence file past ``EPHYRA_EVIDENCE_MAX_BYTES`` is 413.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_POST

from missions import roles as mission_roles
from missions import services
from missions.evidence import CappedUpload, Evidence, evidence_path
from missions.forms import (
    AddWorkPackageForm,
    CreateForm,
    LinkForm,
    MissionFilterForm,
    MoveForm,
    RoleForm,
    SupersedeForm,
)
from missions.models import ROLE_CHOICES, Mission
from missions.selectors import (
    BASE_KINDS,
    mission_board,
    mission_for,
    mission_history,
    missions_page,
    state_label,
)
from quests.actions import ActionError, Refused, Stale
from quests.models import Workspace
from quests.roles import Role as WorkspaceRole
from quests.roles import workspace_roles


@login_required
@require_GET
def mission_list(request: HttpRequest) -> HttpResponse:
    form = MissionFilterForm(request.GET)
    data = form.cleaned_data if form.is_valid() else {}
    page = missions_page(
        request.user,
        workspace=data.get("workspace", ""),
        state=data.get("state", ""),
        page=request.GET.get("page") or 1,
    )
    roles = workspace_roles(request.user)
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "missions/list.html",
        {
            "section": "missions",
            "form": form,
            "page": page,
            "workspaces": sorted(roles),
            "admin_of": sorted(s for s, held in roles.items() if WorkspaceRole.ADMIN in held),
            "form_key": uuid.uuid4().hex,
            "query": query.urlencode(),
        },
    )


@login_required
@require_POST
def mission_create(request: HttpRequest) -> HttpResponse:
    form = CreateForm(request.POST)
    if not form.is_valid():
        return _invalid(request, form, reverse("missions:list"))
    data = form.cleaned_data
    if data["workspace"] not in workspace_roles(request.user):
        raise Http404("no such workspace")
    workspace = Workspace.objects.get(slug=data["workspace"])
    try:
        done = services.mission_create(
            request.user, workspace, title=data["title"], key=data["key"]
        )
    except ActionError as exc:
        messages.error(request, f"Not done: {exc}")
        return _answer(reverse("missions:list"), "invalid")
    messages.success(request, f"Mission {done.mission.mission_id} is created; you are its lead.")
    return _answer(_page_url(done.mission), "duplicate" if done.duplicate else "applied")


def _mission_or_404(request: HttpRequest, slug: str, mission_id: str) -> Mission:
    # The person's workspace roles, read once for the request (the board needs them too).
    request.workspace_roles = workspace_roles(request.user)
    mission = mission_for(request.user, slug, mission_id, roles=request.workspace_roles)
    if mission is None:
        raise Http404("no such mission")
    return mission


@login_required
@require_GET
def mission_page(request: HttpRequest, slug: str, mission_id: str) -> HttpResponse:
    mission = _mission_or_404(request, slug, mission_id)
    return render(request, "missions/mission.html", _context(request, mission))


def _context(request: HttpRequest, mission: Mission) -> dict:
    board = mission_board(request.user, mission, roles=getattr(request, "workspace_roles", None))
    supersedes = None
    if mission.supersedes:
        supersedes = (
            Mission.objects.filter(workspace_id=mission.workspace_id, mission_id=mission.supersedes)
            .defer("data")
            .first()
        )
    return {
        "section": "missions",
        "mission": mission,
        "workspace": mission.workspace,
        "board": board,
        "supersedes": supersedes,
        "history": mission_history(mission),
        "person_roles": [value for value, _ in ROLE_CHOICES],
        "people": [(value, board.people.get(value, [])) for value, _ in ROLE_CHOICES],
        "base_kinds": BASE_KINDS,
        "form_key": uuid.uuid4().hex,
    }


# --- actions ---------------------------------------------------------------------------------


def _uploads(view: Callable) -> Callable:
    """A view that takes an evidence file: the capped upload handler goes first, before the
    CSRF check reads the body (Django's recipe: exempt the outer view, protect the inner)."""
    protected = csrf_protect(view)

    @csrf_exempt
    @login_required
    @require_POST
    def wrapper(request: HttpRequest, slug: str, mission_id: str) -> HttpResponse:
        request.upload_handlers.insert(0, CappedUpload(request))
        return protected(request, slug, mission_id)

    wrapper.__name__ = view.__name__
    wrapper.__doc__ = view.__doc__
    return wrapper


def _evidence(request: HttpRequest, data: dict) -> Evidence:
    return Evidence(
        kind=data["evidence_kind"],
        text=data.get("evidence_text", ""),
        link=data.get("evidence_link", ""),
        upload=request.FILES.get("evidence_file"),
    )


def _too_large(request: HttpRequest, mission: Mission) -> HttpResponse | None:
    """The 413 page when the capped handler dropped a file (reading the body here, so the
    handler has seen it)."""
    request.FILES  # noqa: B018  (parses the body through the handlers)
    handler = next((h for h in request.upload_handlers if isinstance(h, CappedUpload)), None)
    if handler is None or handler.too_large is None:
        return None
    cap = settings.EPHYRA_EVIDENCE_MAX_BYTES
    messages.error(
        request,
        f"Not done: the file “{handler.too_large}” is larger than {cap:,} bytes, the most an "
        "evidence file may be",
    )
    response = render(request, "missions/mission.html", _context(request, mission), status=413)
    response["X-Ephyra-Outcome"] = "invalid"
    return response


def _move(request: HttpRequest, slug: str, mission_id: str) -> HttpResponse:
    """A transition of the mission or of one of its work packages."""
    mission = _mission_or_404(request, slug, mission_id)
    refused = _too_large(request, mission)
    if refused is not None:
        return refused
    form = MoveForm(request.POST)
    if not form.is_valid():
        return _invalid(request, form, _page_url(mission))
    data = form.cleaned_data
    common = {
        "to": data["to"],
        "role": data["role"],
        "evidence": _evidence(request, data),
        "note": data["note"],
        "expected": data["expected"] or None,
        "seen_head": data["seen_head"],
        "key": data["key"],
    }
    subject = data["subject"]
    if subject == mission.mission_id:
        call = partial(services.mission_transition, request.user, mission, **common)
    else:
        call = partial(services.wp_transition, request.user, mission, subject, **common)
    what = f"{subject} is {state_label(data['to'])}."
    return _act(request, mission, call, what)


def _supersede(request: HttpRequest, slug: str, mission_id: str) -> HttpResponse:
    """A new work package (or mission) in place of a FAILED one, linked to it."""
    mission = _mission_or_404(request, slug, mission_id)
    refused = _too_large(request, mission)
    if refused is not None:
        return refused
    form = SupersedeForm(request.POST)
    if not form.is_valid():
        return _invalid(request, form, _page_url(mission))
    data = form.cleaned_data
    common = {
        "title": data["title"],
        "role": data["role"],
        "evidence": _evidence(request, data),
        "key": data["key"],
    }
    if data["subject"] == mission.mission_id:
        try:
            done = services.mission_supersede(request.user, mission, **common)
        except PermissionDenied:
            raise
        except ActionError as exc:
            return _not_done(request, mission, exc)
        messages.success(request, f"{done.mission.mission_id} supersedes {mission.mission_id}.")
        return _answer(_page_url(done.mission), "duplicate" if done.duplicate else "applied")
    subject = data["subject"]
    call = partial(
        services.wp_supersede,
        request.user,
        mission,
        subject,
        seen_head=data["seen_head"] or None,
        **common,
    )
    return _act(request, mission, call, f"{subject} is superseded by a new work package.")


mission_move = _uploads(_move)
mission_supersede = _uploads(_supersede)


@login_required
@require_POST
def mission_link(request: HttpRequest, slug: str, mission_id: str) -> HttpResponse:
    """Name the quest that carries a work package (an existing one, or a new one)."""
    mission = _mission_or_404(request, slug, mission_id)
    form = LinkForm(request.POST)
    if not form.is_valid():
        return _invalid(request, form, _page_url(mission))
    data = form.cleaned_data
    call = partial(
        services.wp_link_quest,
        request.user,
        mission,
        data["wp"],
        quest_id=data["quest"],
        seen_head=data["seen_head"],
        key=data["key"],
    )
    what = f"{data['wp']} is carried by " + (
        f"quest {data['quest']}." if data["quest"] else "a new quest (queued for the worker)."
    )
    return _act(request, mission, call, what)


@login_required
@require_POST
def mission_add_wp(request: HttpRequest, slug: str, mission_id: str) -> HttpResponse:
    mission = _mission_or_404(request, slug, mission_id)
    form = AddWorkPackageForm(request.POST)
    if not form.is_valid():
        return _invalid(request, form, _page_url(mission))
    data = form.cleaned_data
    call = partial(services.wp_add, request.user, mission, title=data["title"], key=data["key"])
    return _act(request, mission, call, "The work package is added.")


@login_required
@require_POST
def mission_roles_change(request: HttpRequest, slug: str, mission_id: str) -> HttpResponse:
    """Give or take a role on the mission (an admin of the workspace)."""
    mission = _mission_or_404(request, slug, mission_id)
    form = RoleForm(request.POST)
    if not form.is_valid():
        return _invalid(request, form, _page_url(mission))
    data = form.cleaned_data
    change = (
        mission_roles.mission_role_grant
        if data["change"] == "grant"
        else mission_roles.mission_role_revoke
    )
    try:
        changed = change(
            request.user, mission.workspace, mission.mission_id, data["username"], data["role"]
        )
    except ActionError as exc:
        messages.error(request, f"Not done: {exc}")
        return _answer(_page_url(mission), "invalid")
    verb = "now holds" if data["change"] == "grant" else "no longer holds"
    if changed:
        messages.success(request, f"{data['username']} {verb} the role {data['role']}.")
    else:
        messages.info(
            request, f"Nothing changed: {data['username']} {verb} the role {data['role']}."
        )
    return _answer(_page_url(mission), "applied" if changed else "duplicate")


def _act(request: HttpRequest, mission: Mission, call: Callable, what: str) -> HttpResponse:
    try:
        done = call()
    except PermissionDenied:
        raise
    except ActionError as exc:
        return _not_done(request, mission, exc)
    if done.duplicate:
        messages.info(request, "Already done: this form was sent before.")
        return _answer(_page_url(mission), "duplicate")
    messages.success(request, what)
    return _answer(_page_url(mission), "applied")


def _not_done(request: HttpRequest, mission: Mission, exc: ActionError) -> HttpResponse:
    if isinstance(exc, Stale):
        messages.error(request, f"Not done: {exc}. The page now shows the mission as it is.")
        return _answer(_page_url(mission), "stale")
    messages.error(request, f"Not done: {exc}")
    return _answer(_page_url(mission), "refused" if isinstance(exc, Refused) else "invalid")


def _invalid(request: HttpRequest, form, url: str) -> HttpResponse:
    errors = "; ".join(f"{name}: {e}" for name, errs in form.errors.items() for e in errs)
    messages.error(request, f"Not done: {errors}")
    return _answer(url, "invalid")


def _answer(url: str, outcome: str) -> HttpResponse:
    response = redirect(url)
    response.status_code = 303
    response["X-Ephyra-Outcome"] = outcome
    return response


def _page_url(mission: Mission) -> str:
    return reverse("missions:mission", args=[mission.workspace.slug, mission.mission_id])


@login_required
@require_GET
def evidence_file(request: HttpRequest, slug: str, sha256: str, name: str) -> FileResponse:
    """An evidence file, to people of its workspace only, as a download (never rendered)."""
    if slug not in workspace_roles(request.user):
        raise Http404("no such workspace")
    path = evidence_path(Workspace.objects.get(slug=slug), sha256)
    if path is None:
        raise Http404("no such evidence file")
    return FileResponse(
        path.open("rb"),
        as_attachment=True,
        filename=name,
        content_type="application/octet-stream",
    )
