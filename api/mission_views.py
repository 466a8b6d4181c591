"""Missions over HTTP, on ``missions.selectors`` (reads) and ``missions.services`` (the one
write path): the list, one mission with its work packages and the moves the machine offers
you, creating one, transitions, new and superseding work packages, the quest that carries a
work package, and evidence files."""

from __future__ import annotations

from contextlib import ExitStack

from django.core.files import File
from django.core.paginator import EmptyPage
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers as s
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from api import serializers as io
from api.base import ApiView, idempotent
from api.problems import Problem
from missions import services
from missions.evidence import Evidence, evidence_path, resolve
from missions.roles import mission_roles
from missions.selectors import mission_board, mission_for, mission_history, missions_page
from quests.actions import Stale
from quests.roles import require

IDEMPOTENCY = OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER)


class MissionFilters(s.Serializer):
    state = s.CharField(required=False, max_length=16)
    page = s.IntegerField(required=False, min_value=1, default=1)


def _summary(request, mission, counts: dict | None = None) -> dict:
    slug = mission.workspace.slug
    return {
        "id": mission.mission_id,
        "workspace": slug,
        "title": mission.title,
        "state": mission.state,
        "head": mission.journal_head,
        "wp_counts": counts or {},
        "url": request.build_absolute_uri(
            reverse("missions:mission", args=[slug, mission.mission_id])
        ),
    }


def _offer(offer) -> dict:
    return {
        "kind": offer.kind,
        "subject": offer.subject,
        "to": offer.to,
        "roles": list(offer.roles),
        "evidence": offer.evidence,
    }


def detail(request, mission) -> dict:
    board = mission_board(request.user, mission)
    counts: dict[str, int] = {}
    wps = []
    for card in board.cards.values():
        wp = card.wp
        counts[wp.state] = counts.get(wp.state, 0) + 1
        carrier = card.carrier
        wps.append(
            {
                "id": wp.wp_id,
                "title": wp.title,
                "state": wp.state,
                "supersedes": wp.supersedes,
                "superseded_by": card.superseded_by,
                "quest": {
                    "id": carrier.quest_id,
                    "found": carrier.found,
                    "state": carrier.state,
                    "revision": carrier.revision,
                    "checkpoint": carrier.checkpoint,
                    "proof_digest": carrier.proof_digest,
                }
                if carrier
                else None,
                "makers": list(wp.makers),
                "checker": wp.checker,
                "offers": [_offer(o) for o in card.offers],
                "evidence_kinds": list(card.kinds),
            }
        )
    offers = [_offer(o) for o in board.offers]
    if board.supersede is not None:
        offers.append(_offer(board.supersede))
    history = [
        {
            "at": h.at.isoformat(),
            "kind": h.kind,
            "subject": h.subject,
            "before": h.before,
            "after": h.after,
            "actor": h.actor,
            "role": h.role,
            "evidence": h.evidence,
            "note": h.note,
            "commit": h.commit,
            **h.detail,
        }
        for h in mission_history(mission)
    ]
    return {
        **_summary(request, mission, counts),
        "roles": sorted(str(r) for r in board.held),
        "people": board.people,
        "offers": offers,
        "work_packages": wps,
        "ledger": board.ledger,
        "history": history,
        "supersedes": mission.supersedes or "",
        "superseded_by": [m.mission_id for m in board.superseded_by],
    }


class MissionBase(ApiView):
    def mission(self, ws: str, mid: str):
        self.workspace(ws)
        mission = mission_for(self.request.user, ws, mid)
        if mission is None:
            raise Problem("not-found", f"no mission {mid!r} in {ws!r}")
        return mission

    def answer(self, request, ws: str, mid: str, done, *, status: int = 200) -> Response:
        fresh = self.mission(ws, done.mission.mission_id if done else mid)
        body = {
            "status": "duplicate" if done.duplicate else "applied",
            "mission": detail(request, fresh),
        }
        return Response(io.MissionAnswer(body).data, status=status)

    def stale(self, ws: str, mid: str, exc: Exception) -> Problem:
        fresh = self.mission(ws, mid)
        return Problem("stale-head", str(exc), state=fresh.state, head=fresh.journal_head)


class Missions(MissionBase):
    @extend_schema(
        operation_id="missions_list",
        parameters=[MissionFilters],
        responses=io.MissionList,
        tags=["missions"],
    )
    def get(self, request, ws: str):
        """The workspace's missions, newest first, with their work packages counted by state."""
        self.workspace(ws)
        q = self.query(MissionFilters)
        try:
            page = missions_page(
                request.user, workspace=ws, state=q.get("state", ""), page=q["page"]
            )
        except EmptyPage:
            raise Problem("not-found", f"there is no page {q['page']}") from None
        rows = [_summary(request, m, {state: n for state, _, n in m.wp_counts if n}) for m in page]
        after = str(page.next_page_number()) if page.has_next() else None
        return Response(io.MissionList({"results": rows, "next": after}).data)

    @extend_schema(
        operation_id="mission_create",
        request=io.Title,
        responses={201: io.MissionAnswer},
        parameters=[IDEMPOTENCY],
        tags=["missions"],
    )
    @idempotent
    def post(self, request, ws: str, *, key: str):
        """A new mission (admins); you become its lead."""
        workspace = self.workspace(ws)
        require(request.user, workspace, "administer")
        data = self.body(io.Title)
        done = services.mission_create(request.user, workspace, title=data["title"], key=key)
        return self.answer(request, ws, done.mission.mission_id, done, status=201)


class MissionDetail(MissionBase):
    @extend_schema(operation_id="mission_get", responses=io.MissionDetail, tags=["missions"])
    def get(self, request, ws: str, mid: str):
        """The mission with its work packages, the moves offered to you, its attempt ledger
        and its history."""
        return Response(io.MissionDetail(detail(request, self.mission(ws, mid))).data)


def _evidence(workspace, given: dict, stack: ExitStack) -> Evidence:
    """The evidence item of a request: ``{"kind": ...}``, or ``{"<name>": "<text>"}``."""
    if "kind" not in given and len(given) == 1:
        value = next(iter(given.values()))
        given = value if isinstance(value, dict) else {"kind": "text", "text": str(value)}
    kind = str(given.get("kind", "text"))
    if kind == "file":
        path = evidence_path(workspace, str(given.get("sha256", "")))
        if path is None:
            raise Problem(
                "invalid-input",
                "no evidence file with that sha256 was uploaded",
                errors={"evidence": ["upload the file first (POST .../evidence)"]},
            )
        handle = stack.enter_context(path.open("rb"))
        return Evidence("file", upload=File(handle, name=str(given.get("name") or path.name)))
    return Evidence(kind, text=str(given.get("text", "")), link=str(given.get("link", "")))


class MissionTransition(MissionBase):
    @extend_schema(
        operation_id="mission_transition",
        request=io.Transition,
        responses=io.MissionAnswer,
        parameters=[IDEMPOTENCY],
        tags=["missions"],
    )
    @idempotent
    def post(self, request, ws: str, mid: str, wp: str = "", *, key: str):
        """Move the mission (or one of its work packages), acting in one of your roles on it,
        with the evidence the move requires; the machine decides."""
        mission = self.mission(ws, mid)
        data = self.body(io.Transition)
        with ExitStack() as stack:
            common = {
                "to": data["to"].lower(),
                "role": data["role"],
                "evidence": _evidence(mission.workspace, data["evidence"], stack),
                "note": data["note"],
                "expected": data["expected"] or None,
                "seen_head": data["head"] or None,
                "key": key,
            }
            try:
                if wp:
                    done = services.wp_transition(request.user, mission, wp, **common)
                else:
                    done = services.mission_transition(request.user, mission, **common)
            except Stale as exc:
                raise self.stale(ws, mid, exc) from None
        return self.answer(request, ws, mid, done)


class WpTransition(MissionTransition):
    @extend_schema(
        request=io.Transition,
        responses=io.MissionAnswer,
        parameters=[IDEMPOTENCY],
        tags=["missions"],
        operation_id="wp_transition",
    )
    def post(self, request, ws: str, mid: str, wp: str):
        return MissionTransition.post(self, request, ws, mid, wp)


class WpAdd(MissionBase):
    @extend_schema(
        operation_id="wp_add",
        request=io.Title,
        responses={201: io.MissionAnswer},
        parameters=[IDEMPOTENCY],
        tags=["missions"],
    )
    @idempotent
    def post(self, request, ws: str, mid: str, *, key: str):
        """Plan a new work package (the mission's lead)."""
        mission = self.mission(ws, mid)
        data = self.body(io.Title)
        done = services.wp_add(request.user, mission, title=data["title"], key=key)
        return self.answer(request, ws, mid, done, status=201)


class WpSupersede(MissionBase):
    @extend_schema(
        operation_id="wp_supersede",
        request=io.Supersede,
        responses={201: io.MissionAnswer},
        parameters=[IDEMPOTENCY],
        tags=["missions"],
    )
    @idempotent
    def post(self, request, ws: str, mid: str, wp: str, *, key: str):
        """Replace a FAILED work package by a new one linked to it, with a failure analysis."""
        mission = self.mission(ws, mid)
        data = self.body(io.Supersede)
        with ExitStack() as stack:
            try:
                done = services.wp_supersede(
                    request.user,
                    mission,
                    wp,
                    title=data["title"],
                    role=data["role"],
                    evidence=_evidence(mission.workspace, data["evidence"], stack),
                    seen_head=data["head"] or None,
                    key=key,
                )
            except Stale as exc:
                raise self.stale(ws, mid, exc) from None
        return self.answer(request, ws, mid, done, status=201)


class WpLink(MissionBase):
    @extend_schema(
        operation_id="wp_link",
        request=io.Link,
        responses=io.MissionAnswer,
        parameters=[IDEMPOTENCY],
        tags=["missions"],
    )
    @idempotent
    def post(self, request, ws: str, mid: str, wp: str, *, key: str):
        """Name the quest that carries the work package: ``quest`` (an existing one), or none
        to open a new quest for it (the lead)."""
        mission = self.mission(ws, mid)
        data = self.body(io.Link)
        try:
            done = services.wp_link_quest(
                request.user,
                mission,
                wp,
                quest_id=data["quest"],
                seen_head=data["head"] or None,
                key=key,
            )
        except Stale as exc:
            raise self.stale(ws, mid, exc) from None
        return self.answer(request, ws, mid, done)


class EvidenceUpload(MissionBase):
    parser_classes = [MultiPartParser]

    @extend_schema(
        operation_id="evidence_upload",
        request={"multipart/form-data": io.Upload},
        responses={201: io.Uploaded},
        tags=["missions"],
    )
    def post(self, request, ws: str, mid: str):
        """Store a file as evidence for this mission's moves (people holding a role on it):
        its SHA-256 names it in a transition's ``{"kind": "file", "sha256": ...}``."""
        mission = self.mission(ws, mid)
        if not mission_roles(request.user, mission.workspace, mission.mission_id):
            raise Problem("forbidden", f"you hold no role on mission {mid}")
        upload = request.FILES.get("file")
        if upload is None:
            raise Problem(
                "invalid-input",
                "no file was uploaded",
                errors={"file": ["a multipart field named file"]},
            )
        item, staged = resolve(mission.workspace, Evidence("file", upload=upload))
        staged.keep()
        body = {"sha256": item["sha256"], "size": item["size"], "name": item["name"]}
        return Response(io.Uploaded(body).data, status=201)
