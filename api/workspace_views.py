"""Who you are, your workspaces, and per workspace: the ledger (an admin settles an ambiguous
or dead operation), the audit trail (admins and staff; verify the chain) and the policy
(versions; proposals, four eyes, through ``quests.policies``)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from api import serializers as io
from api.base import ApiView, idempotent, keyset
from api.problems import Problem
from ledger.audit import audit_check
from ledger.selectors import AuditFilters, audit_entries, operation_of, operations
from quests import actions, policies
from quests.models import PolicyProposal, PolicyVersion
from quests.roles import require, workspace_roles
from quests.selectors import workspaces_for

IDEMPOTENCY = OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER)
VERDICTS = {
    "done": "succeeded",
    "dead": "failed",
    "absent": "absent",
    "succeeded": "succeeded",
    "failed": "failed",
}


class Me(ApiView):
    @extend_schema(operation_id="me", responses=io.Me, tags=["workspaces"])
    def get(self, request):
        """Who the credentials act as, and the roles they hold in each workspace."""
        roles = workspace_roles(request.user)
        token = getattr(request.auth, "prefix", None) and request.auth
        body = {
            "username": request.user.get_username(),
            "workspaces": [{"slug": s, "roles": sorted(roles[s])} for s in sorted(roles)],
            "token": {
                "prefix": token.prefix,
                "role": token.role,
                "workspaces": token.workspaces,
                "expires_at": token.expires_at.isoformat(),
            }
            if token
            else None,
        }
        return Response(io.Me(body).data)


def _workspace(workspace, roles) -> dict:
    return {
        "slug": workspace.slug,
        "name": workspace.name,
        "base_branch": workspace.base_branch,
        "roles": sorted(roles.get(workspace.slug, ())),
        "policy": workspace.policy.digest if workspace.policy_id else None,
    }


class Workspaces(ApiView):
    @extend_schema(operation_id="workspaces_list", responses=io.WorkspaceList, tags=["workspaces"])
    def get(self, request):
        """The workspaces you hold a role in."""
        roles = workspace_roles(request.user)
        rows = [_workspace(w, roles) for w in workspaces_for(request.user)]
        return Response(io.WorkspaceList({"results": rows}).data)


class WorkspaceDetail(ApiView):
    @extend_schema(operation_id="workspace_get", responses=io.WorkspaceOut, tags=["workspaces"])
    def get(self, request, ws: str):
        workspace = self.workspace(ws)
        return Response(io.WorkspaceOut(_workspace(workspace, workspace_roles(request.user))).data)


# --- the ledger --------------------------------------------------------------------------------


def _operation(op) -> dict:
    return {
        "key": op.key,
        "workspace": op.workspace.slug,
        "quest": op.quest_id,
        "type": op.type,
        "state": op.state,
        "attempts": op.attempts,
        "created_at": op.created_at,
        "updated_at": op.updated_at,
        "payload": op.payload,
        "outcome": op.outcome or None,
    }


class Ledger(ApiView):
    @extend_schema(
        operation_id="ledger_list",
        parameters=[io.LedgerFilters],
        responses=io.OperationList,
        tags=["ledger"],
    )
    def get(self, request, ws: str):
        """The workspace's ledger operations, newest first."""
        self.workspace(ws)
        q = self.query(io.LedgerFilters)
        rows = operations(
            [ws], state=q.get("state", ""), type=q.get("type", ""), quest=q.get("quest", "")
        )
        page, after = keyset(rows, None, q.get("cursor"), q["limit"])
        body = {"results": [_operation(op) for op in page], "next": after}
        return Response(io.OperationList(body).data)


class LedgerResolve(ApiView):
    @extend_schema(
        operation_id="ledger_resolve",
        request=io.Resolve,
        responses={200: io.Resolution, 202: io.Resolution},
        parameters=[IDEMPOTENCY],
        tags=["ledger"],
    )
    @idempotent
    def post(self, request, ws: str, op_key: str, *, key: str):
        """An admin's verdict on an ambiguous or dead operation, queued for the worker."""
        self.workspace(ws)
        op = operation_of([ws], ws, op_key)
        if op is None:
            raise Problem("not-found", f"no operation {op_key!r} in {ws!r}")
        require(request.user, op.workspace, "administer")
        data = self.body(io.Resolve)
        done = actions.operation_resolve(
            request.user, op, verdict=VERDICTS[data["verdict"]], note=data["note"], key=key
        )
        if done.outcome == "refused":
            raise Problem("refused", done.reason or "refused", reason=done.reason or "refused")
        body = {"status": done.outcome, "key": op.key, "verdict": done.verdict, "state": done.state}
        return Response(io.Resolution(body).data, status=200 if done.outcome == "applied" else 202)


# --- the audit trail ---------------------------------------------------------------------------


class Audit(ApiView):
    @extend_schema(
        operation_id="audit_list", parameters=[io.Page], responses=io.AuditList, tags=["audit"]
    )
    def get(self, request, ws: str):
        """The workspace's audit entries, newest first (admins and staff)."""
        require(request.user, self.workspace(ws), "audit")
        q = self.query(io.Page)
        rows = audit_entries([ws], AuditFilters())
        page, after = keyset(rows, "at", q.get("cursor"), q["limit"])
        body = {
            "results": [
                {
                    "sequence": e.sequence,
                    "at": e.at,
                    "actor": e.actor,
                    "action": e.action,
                    "object": e.object,
                    "payload": e.payload,
                    "hash": e.entry_hash,
                }
                for e in page
            ],
            "next": after,
        }
        return Response(io.AuditList(body).data)


class AuditVerify(ApiView):
    @extend_schema(
        operation_id="audit_verify", request=None, responses=io.AuditVerdict, tags=["audit"]
    )
    def post(self, request, ws: str):
        """Verify the workspace's hash chain and its anchors in Git (admins and staff)."""
        workspace = self.workspace(ws)
        require(request.user, workspace, "audit")
        check = audit_check(workspace)
        body = {
            "ok": check.ok,
            "entries": check.verified,
            "first_bad": check.broken_at,
            "problem": check.problem or "",
        }
        return Response(io.AuditVerdict(body).data)


# --- the policy --------------------------------------------------------------------------------


def _versions(workspace) -> list[PolicyVersion]:
    return list(PolicyVersion.objects.filter(workspace=workspace).order_by("pk").defer("text"))


def _version(workspace, n: int, row: PolicyVersion, *, text: bool = False) -> dict:
    body = {
        "number": n,
        "digest": row.digest,
        "current": workspace.policy_id == row.pk,
        "reviewed_by": row.reviewed_by,
        "created_at": row.created_at,
    }
    if text:
        body["text"] = row.text
    return body


def _proposal(p: PolicyProposal) -> dict:
    return {
        "id": p.pk,
        "state": p.state,
        "digest": p.version.digest,
        "proposed_by": p.proposed_by.get_username(),
        "decided_by": p.decided_by.get_username() if p.decided_by_id else None,
        "note": p.note,
        "reason": p.reason,
    }


class PolicyVersions(ApiView):
    @extend_schema(
        operation_id="policy_versions_list", responses=io.PolicyVersionList, tags=["policy"]
    )
    def get(self, request, ws: str):
        """The workspace's policy versions (1 is the oldest) and its proposals (admins)."""
        workspace = self.workspace(ws)
        require(request.user, workspace, "administer")
        proposals = (
            PolicyProposal.objects.filter(workspace=workspace)
            .select_related("version", "proposed_by", "decided_by")
            .order_by("-pk")[:50]
        )
        body = {
            "results": [_version(workspace, n, v) for n, v in enumerate(_versions(workspace), 1)],
            "proposals": [_proposal(p) for p in proposals],
        }
        return Response(io.PolicyVersionList(body).data)


class PolicyVersionDetail(ApiView):
    @extend_schema(
        operation_id="policy_version_get", responses=io.PolicyVersionText, tags=["policy"]
    )
    def get(self, request, ws: str, n: int):
        """Version ``n`` of the workspace's policy, with its text (admins)."""
        workspace = self.workspace(ws)
        require(request.user, workspace, "administer")
        versions = _versions(workspace)
        if not 1 <= n <= len(versions):
            raise Problem("not-found", f"{ws} has {len(versions)} policy versions, not {n}")
        row = PolicyVersion.objects.get(pk=versions[n - 1].pk)
        return Response(io.PolicyVersionText(_version(workspace, n, row, text=True)).data)


class PolicyPropose(ApiView):
    @extend_schema(
        operation_id="policy_propose",
        request=io.PolicyText,
        responses={201: io.ProposalOut},
        parameters=[IDEMPOTENCY],
        tags=["policy"],
    )
    @idempotent
    def post(self, request, ws: str, *, key: str):
        """Propose a policy text (checked as the worker reads it); another admin approves."""
        workspace = self.workspace(ws)
        require(request.user, workspace, "administer")
        data = self.body(io.PolicyText)
        proposal = policies.policy_propose(request.user, workspace, data["text"], data["note"])
        return Response(io.ProposalOut(_proposal(proposal)).data, status=201)


class ProposalStep(ApiView):
    step = ""

    def post(self, request, ws: str, proposal_id: int):
        workspace = self.workspace(ws)
        require(request.user, workspace, "administer")
        proposal = get_object_or_404(
            PolicyProposal.objects.select_related("workspace", "version", "proposed_by"),
            workspace=workspace,
            pk=proposal_id,
        )
        data = self.body(io.ReasonOnly) if self.step != "approve" else {}
        if self.step == "approve":
            proposal = policies.policy_approve(request.user, proposal)
        elif self.step == "reject":
            proposal = policies.policy_reject(request.user, proposal, data["reason"])
        else:
            proposal = policies.policy_withdraw(request.user, proposal, data["reason"])
        return Response(io.ProposalOut(_proposal(proposal)).data)


def _step_view(step: str):
    def post(self, request, ws: str, proposal_id: int):
        return ProposalStep.post(self, request, ws, proposal_id)

    post = extend_schema(
        request=None if step == "approve" else io.ReasonOnly,
        responses=io.ProposalOut,
        operation_id=f"policy_proposal_{step}",
        tags=["policy"],
    )(post)
    return type(f"Proposal{step.title()}", (ProposalStep,), {"step": step, "post": post})


STEP_VIEWS = {step: _step_view(step) for step in ("approve", "reject", "withdraw")}
