"""The demo's workspace: the shop's remote registered, its policy proposed and approved (four
eyes, by two demo accounts), an ingest token for production, and the reviewer who approves
checkpoints when ``--approve-as`` names one. Everything through the services people use."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model

from demo.service import Service, service_create
from intake.otlp.tokens import token_issue
from quests.models import Workspace
from quests.policies import policy_approve, policy_propose
from quests.roles import Role, role_grant
from quests.workspaces import workspace_add

# The demo's policy: a person at every checkpoint, the proof the issue names, a fast-forward
# landing, a one-minute watch that opens when the landed commit is deployed.
POLICY = """version: 1
checkpoints: {{A: {{mode: blocking}}, B: {{mode: blocking}}, C: {{mode: blocking}}}}
proof:
  attempts: 2
  matrix: {{low: [tests, probe], medium: [tests, probe], high: [tests, probe]}}
triage:
  default: {{route: auto_fix, risk: low}}
landing: {{style: fast-forward}}
watch:
  starts: deployment
  minutes: {minutes}
  min_events: 5
  max_error_rate_ratio: 1.5
  max_new_fingerprints: 0
work:
  runner: local
  test: [{python}, -m, pytest, -q]
  limits: {{test_seconds: 120, probe_seconds: 60}}
"""
OPS, LEAD = "demo-ops", "demo-lead"  # who proposes the demo's policy, who approves it


@dataclass(frozen=True)
class DemoWorkspace:
    workspace: Workspace
    service: Service
    token: str
    home: Path  # everything the demo writes: the shop's clone, its remote, production


def demo_workspace(scenario: str, *, watch_minutes: int = 1) -> DemoWorkspace:
    """A new workspace for one run of the demo (``demo``, then ``demo-2``…: an earlier run's
    quests stay as they were) and the shop it works on."""
    slug = _free_slug()
    home = Path(settings.DATA_DIR) / "demo" / slug
    service = service_create(home, scenario)
    ops, lead = _creator(), _account(LEAD)
    workspace = workspace_add(ops, slug, str(service.remote), name=f"Demo shop ({slug})")
    role_grant(lead, workspace, Role.ADMIN)
    text = POLICY.format(minutes=watch_minutes, python=sys.executable)
    proposal = policy_propose(ops, workspace, text, note="the demo's policy")
    policy_approve(lead, proposal)
    _, token = token_issue(ops, workspace, name="demo production")
    return DemoWorkspace(Workspace.objects.get(pk=workspace.pk), service, token, home)


def reviewer(username: str, workspace: Workspace):
    """The account that approves checkpoints for ``--approve-as``, a reviewer of the workspace
    (made without a password when it does not exist: set one to sign in)."""
    user = _account(username)
    if not user.is_superuser:
        role_grant(user, workspace, Role.REVIEWER)
    return user


def _free_slug() -> str:
    taken = set(Workspace.objects.filter(slug__startswith="demo").values_list("slug", flat=True))
    if "demo" not in taken:
        return "demo"
    n = 2
    while f"demo-{n}" in taken:
        n += 1
    return f"demo-{n}"


def _account(username: str):
    users = get_user_model()
    user = users.objects.filter(username=username).first()
    if user is None:
        user = users.objects.create_user(username)  # no usable password
    return user


def _creator():
    """Who adds the demo's workspaces: an account allowed to add workspaces, made once."""
    from django.contrib.auth.models import Permission

    user = _account(OPS)
    if not user.has_perm("quests.add_workspace"):
        user.user_permissions.add(
            Permission.objects.get(codename="add_workspace", content_type__app_label="quests")
        )
        user = get_user_model().objects.get(pk=user.pk)  # permissions are cached per instance
    return user
