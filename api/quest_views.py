"""Quests over HTTP: the list (the inbox's filters, a cursor), one quest (its timeline,
evidence, proof and effects), a person's actions through the action layer, and events from an
integration queued for the worker."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from api import serializers as io
from api.base import ApiView, idempotent, keyset
from api.problems import Problem
from ephyra.core import events as ev
from ephyra.paging import capped_counts
from ledger.inbound import EventConflict, submit_event
from quests import actions
from quests.actions import Seen, Stale
from quests.models import Quest
from quests.roles import ALLOWED, allows, require
from quests.selectors import (
    InboxFilters,
    checkpoint_of,
    quest_effects,
    quest_for,
    quest_proof,
    quest_timeline,
    quests_for,
)

# Events only a person sends, through the action layer (with their account as the actor).
PERSON_ONLY = frozenset(
    {
        "claimed",
        "released",
        "checkpoint_decided",
        "comment_added",
        "paused",
        "resumed",
        "killed",
        "human_revision",
        "spend_decided",
    }
)
EVIDENCE_FIELDS = (
    "fingerprint",
    "hypothesis",
    "probe",
    "plan",
    "last_signal",
    "base",
    "patch_head",
    "landed_commit",
    "deployed_commit",
    "park_reason",
)


def summary(request, quest: Quest) -> dict:
    slug = quest.workspace.slug
    return {
        "id": quest.quest_id,
        "workspace": slug,
        "title": quest.title,
        "state": quest.state,
        "checkpoint": checkpoint_of(quest) or None,
        "severity": quest.severity,
        "risk": quest.risk or None,
        "revision": quest.revision,
        "head": quest.journal_head,
        "claimed_by": quest.claim or None,
        "signals": quest.signal_count,
        "created_at": quest.created_at,
        "updated_at": quest.updated_at,
        "url": request.build_absolute_uri(reverse("inbox:quest", args=[slug, quest.quest_id])),
    }


def _list(request, filters: dict, workspace: str) -> Response:
    rows = quests_for(
        request.user,
        InboxFilters(
            workspace=workspace,
            state=filters.get("state", ""),
            checkpoint=filters.get("checkpoint", ""),
            severity=filters.get("severity", ""),
            route=filters.get("route", ""),
            mine=filters["mine"],
            unclaimed=filters["unclaimed"],
            text=filters.get("q", ""),
            waiting=filters["waiting"],
        ),
    )
    tally = capped_counts({"rows": rows})["rows"]
    page, after = keyset(rows, "updated_at", filters.get("cursor"), filters["limit"])
    body = {
        "results": [summary(request, q) for q in page],
        "next": after,
        "count": int(tally),
        "count_capped": tally.more,
    }
    return Response(io.QuestList(body).data)


class QuestsAcross(ApiView):
    @extend_schema(
        operation_id="quests_across",
        parameters=[io.QuestFilters],
        responses=io.QuestList,
        tags=["quests"],
    )
    def get(self, request):
        """Quests of every workspace you may read (or of ``workspace``), latest first."""
        filters = self.query(io.QuestFilters)
        slug = filters.get("workspace", "")
        if slug:
            self.workspace(slug)
        return _list(request, filters, slug)


class QuestsOf(ApiView):
    @extend_schema(
        operation_id="quests_list",
        parameters=[io.QuestFilters],
        responses=io.QuestList,
        tags=["quests"],
    )
    def get(self, request, ws: str):
        """The workspace's quests, latest first, with the inbox's filters."""
        self.workspace(ws)
        return _list(request, self.query(io.QuestFilters), ws)


def quest_or_404(request, ws: str, quest_id: str) -> Quest:
    quest = quest_for(request.user, ws, quest_id)
    if quest is None:
        raise Problem("not-found", f"no quest {quest_id!r} in {ws!r}")
    return quest


def _summary_line(entry) -> str:
    if entry.outcome == "refused":
        return f"refused: {entry.reason}"
    text = entry.detail.get("body") or entry.detail.get("comment") or entry.detail.get("reason")
    move = f"{entry.state_before or 'new'} → {entry.state}" if entry.state else ""
    return " · ".join(part for part in (move, str(text or "")) if part)


class QuestDetail(ApiView):
    @extend_schema(operation_id="quest_get", responses=io.QuestDetail, tags=["quests"])
    def get(self, request, ws: str, quest_id: str):
        """One quest: its summary, timeline (newest first), evidence, proof and effects."""
        quest = quest_or_404(request, ws, quest_id)
        proof = quest_proof(quest)
        checks = list(proof.bundle.get("checks", [])) if proof else []
        roles = self.roles(ws)
        body = {
            **summary(request, quest),
            "timeline": [
                {
                    "at": t.at,
                    "event": t.event_id,
                    "type": t.type,
                    "actor": t.actor,
                    "outcome": t.outcome,
                    "state": t.state,
                    "summary": _summary_line(t),
                }
                for t in quest_timeline(quest)
            ],
            "evidence": {k: quest.data.get(k) for k in EVIDENCE_FIELDS if quest.data.get(k)},
            "proof": {
                "digest": proof.digest,
                "matches": proof.matches,
                "checks": checks,
                "verdict": "passed"
                if checks and all(c.get("passed") for c in checks)
                else ("failed" if checks else "none"),
            }
            if proof
            else None,
            "effects": [
                {"key": op.key, "type": op.type, "state": op.state} for op in quest_effects(quest)
            ],
            "offers": sorted(a for a in ALLOWED if a != "read" and allows(roles, a)),
        }
        return Response(io.QuestDetail(body).data)


ACTIONS = {
    "claim": io.Head,
    "release": io.Head,
    "decide": io.Decide,
    "comment": io.Comment,
    "pause": io.Reason,
    "resume": io.Head,
    "kill": io.Kill,
}


class QuestAction(ApiView):
    action = ""

    @idempotent
    def post(self, request, ws: str, quest_id: str, *, key: str):
        quest = quest_or_404(request, ws, quest_id)
        data = self.body(ACTIONS[self.action])
        seen = Seen(data.get("head", ""), quest.revision)
        user, name = request.user, self.action
        try:
            text = data.get("comment") or data.get("body") or data.get("reason") or ""
            done = actions.quest_act(
                user, quest, name, seen=seen, key=key,
                checkpoint=data.get("checkpoint", ""), verdict=data.get("decision", ""), text=text,
            )  # fmt: skip
        except Stale as exc:
            raise _stale(request, ws, quest_id, str(exc)) from None
        done.wait(settings.EPHYRA_ACTION_WAIT_MS / 1000)
        if done.state == "refused" or done.state == "dead":
            if done.row.result.get("stale"):
                raise _stale(request, ws, quest_id, done.reason)
            raise Problem("refused", done.reason or "refused", reason=done.reason or "refused")
        fresh = quest_or_404(request, ws, quest_id)
        body = {
            "status": "applied" if done.state == "applied" else "queued",
            "event": done.event.id,
            "quest": summary(request, fresh),
        }
        return Response(io.ActionAnswer(body).data, status=200 if done.state == "applied" else 202)


def _stale(request, ws: str, quest_id: str, detail: str) -> Problem:
    fresh = quest_or_404(request, ws, quest_id)
    return Problem(
        "stale-head", detail, state=fresh.state, head=fresh.journal_head, revision=fresh.revision
    )


def _action_view(name: str):
    serializer = ACTIONS[name]

    def post(self, request, ws: str, quest_id: str):
        return QuestAction.post(self, request, ws, quest_id)

    post = extend_schema(
        request=serializer,
        responses={200: io.ActionAnswer, 202: io.ActionAnswer},
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER)],
        operation_id=f"quest_{name}",
        tags=["quest actions"],
        description=f"{name} the quest through the action layer; `head` is the journal head "
        "you read (a moved quest is a 409 problem).",
    )(post)
    return type(f"Quest{name.title()}", (QuestAction,), {"action": name, "post": post})


ACTION_VIEWS = {name: _action_view(name) for name in ACTIONS}


class QuestEvents(ApiView):
    @extend_schema(
        operation_id="quest_events",
        request=dict,
        responses={202: io.EventQueued},
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER)],
        tags=["quests"],
    )
    @idempotent
    def post(self, request, ws: str, quest_id: str, *, key: str):
        """Queue one event (its JSON, as the journal holds events) for the workspace's worker,
        as a webhook does; admins only. Events only a person sends are refused (422): use the
        actions."""
        quest = quest_or_404(request, ws, quest_id)
        require(request.user, quest.workspace, "administer")
        data = request.data
        if not hasattr(data, "get"):
            raise Problem(
                "invalid-input",
                "the body must be a JSON event",
                errors={"body": ["expected a JSON object"]},
            )
        data = {"quest": quest_id, **dict(data)}
        if data["quest"] != quest_id:
            raise Problem(
                "invalid-input",
                "the event names another quest",
                errors={"quest": [f"must be {quest_id}"]},
            )
        if data.get("type") in PERSON_ONLY:
            reason = f"{data['type']} is a person's action: send it through its action endpoint"
            raise Problem("refused", reason, reason=reason)
        try:
            event = ev.parse_event(data)
        except ValueError as exc:
            raise Problem(
                "invalid-input",
                "not an event this server knows",
                errors={"event": [_first_error(exc)]},
            ) from None
        try:
            row = submit_event(quest.workspace, event, source=f"api:{request.user.get_username()}")
        except EventConflict as exc:
            raise Problem("refused", str(exc), reason=str(exc)) from None
        body = {"status": "applied" if row.state == "applied" else "queued", "event": event.id}
        return Response(io.EventQueued(body).data, status=202)


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors) and errors():
        first = errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        return f"{where}: {first.get('msg', 'invalid')}" if where else first.get("msg", "invalid")
    return str(exc)
