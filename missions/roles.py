"""Who holds which role on a mission: lead, maker, debugger, checker, human, higher.

A role on a mission is given to an account by an admin of the mission's workspace, to someone
who may decide there (a reviewer or an admin of it: staff only read). A person acts on a
mission only in a role they hold on it, and only while they still may decide in the
workspace; the account's user name is the actor the machine sees, so "the checker is not the
maker" holds by account. A superuser holds every workspace role but no mission role until
given one: the mission's roles are who is who in its story, not permissions.
"""

from __future__ import annotations

from collections import defaultdict

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone

from ephyra.core.mission import Role
from ledger.audit import audit_append
from missions.models import PERSON_ROLES, Mission, MissionRole
from quests.actions import Invalid
from quests.models import Workspace
from quests.projection import lock_workspace
from quests.roles import Role as WorkspaceRole
from quests.roles import may, require, roles_of

DECIDERS = frozenset({WorkspaceRole.REVIEWER, WorkspaceRole.ADMIN})


def mission_roles(user, workspace: Workspace, mission_id: str) -> frozenset[Role]:
    """The roles ``user`` holds on the mission and may use now: none unless they may decide in
    the workspace (an account that lost its workspace role keeps its mission roles on record,
    but cannot use them)."""
    if not may(user, workspace, "decide"):
        return frozenset()
    held = MissionRole.objects.filter(
        workspace=workspace, mission_id=mission_id, user_id=user.pk
    ).values_list("role", flat=True)
    return frozenset(Role(role) for role in held)


def require_role(held: frozenset[Role], role: str, mission_id: str) -> Role:
    """``role`` parsed, if it is among ``held``; ``PermissionDenied`` otherwise."""
    try:
        parsed = Role(str(role).strip().lower())
    except ValueError:
        known = ", ".join(PERSON_ROLES)
        raise Invalid(f"unknown role {role!r}; a role is one of {known}") from None
    if parsed not in held:
        mine = ", ".join(sorted(held)) or "none"
        raise PermissionDenied(
            f"you do not hold the role {parsed} on mission {mission_id} (yours: {mine})"
        )
    return parsed


def mission_people(workspace: Workspace, mission_ids: list[str]) -> dict[str, dict[str, list]]:
    """Who holds which role on each mission, in one query: mission id -> role -> user names."""
    people: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    rows = (
        MissionRole.objects.filter(workspace=workspace, mission_id__in=mission_ids)
        .order_by("role", "user__username")
        .values_list("mission_id", "role", "user__username")
    )
    for mission_id, role, username in rows:
        people[mission_id][role].append(username)
    return {m: dict(by_role) for m, by_role in people.items()}


def mission_role_grant(admin, workspace: Workspace, mission_id: str, username: str, role: str):
    """Give the account ``username`` ``role`` on the mission; an admin of the workspace only
    (``PermissionDenied``). The account must be active and a reviewer or admin of the workspace
    (``Invalid`` otherwise, as for an unknown role or account). Returns False when they held it
    already; a grant is audited as ``mission.role_granted``."""
    require(admin, workspace, "administer")
    account, parsed = _account(workspace, username), _role(role)
    if not Mission.objects.filter(workspace=workspace, mission_id=mission_id).exists():
        raise Invalid(f"no mission {mission_id!r} in {workspace.slug}")
    with transaction.atomic():
        lock_workspace(workspace)
        try:
            with transaction.atomic():
                MissionRole.objects.create(
                    workspace=workspace,
                    mission_id=mission_id,
                    user=account,
                    role=parsed,
                    granted_by=admin,
                    granted_at=timezone.now(),
                )
        except IntegrityError:
            return False
        _audit(workspace, admin, "mission.role_granted", mission_id, account, parsed)
    return True


def mission_role_revoke(admin, workspace: Workspace, mission_id: str, username: str, role: str):
    """Take ``role`` on the mission from ``username``; an admin of the workspace only. Returns
    False when they did not hold it; a revocation is audited as ``mission.role_revoked``."""
    require(admin, workspace, "administer")
    parsed = _role(role)
    account = get_user_model().objects.filter(username=username).first()
    if account is None:
        raise Invalid(f"no account {username!r}")
    with transaction.atomic():
        lock_workspace(workspace)
        gone, _ = MissionRole.objects.filter(
            workspace=workspace, mission_id=mission_id, user=account, role=parsed
        ).delete()
        if gone:
            _audit(workspace, admin, "mission.role_revoked", mission_id, account, parsed)
    return bool(gone)


def copy_roles(workspace: Workspace, source: str, target: str) -> int:
    """Give the people of mission ``source`` the same roles on ``target`` (a mission that
    supersedes it), as granted by whoever granted them; how many were copied. Inside the
    caller's transaction, which audits the supersede."""
    rows = MissionRole.objects.filter(workspace=workspace, mission_id=source)
    copies = [
        MissionRole(
            workspace=workspace,
            mission_id=target,
            user_id=row.user_id,
            role=row.role,
            granted_by_id=row.granted_by_id,
            granted_at=timezone.now(),
        )
        for row in rows
    ]
    MissionRole.objects.bulk_create(copies, ignore_conflicts=True)
    return len(copies)


def _account(workspace: Workspace, username: str):
    account = get_user_model().objects.filter(username=(username or "").strip()).first()
    if account is None or not account.is_active:
        raise Invalid(f"no active account {username!r}")
    if not roles_of(account, workspace) & DECIDERS:
        raise Invalid(
            f"{account.get_username()} is not a reviewer or admin of {workspace.slug}; give "
            "them a workspace role first (manage.py roles grant)"
        )
    return account


def _role(role: str) -> Role:
    try:
        parsed = Role(str(role).strip().lower())
    except ValueError:
        parsed = None
    if parsed not in PERSON_ROLES:
        raise Invalid(f"a mission role is one of {', '.join(PERSON_ROLES)}, not {role!r}")
    return parsed  # type: ignore[return-value]


def _audit(workspace, admin, action: str, mission_id: str, account, role: Role) -> None:
    audit_append(
        workspace,
        at=timezone.now(),
        actor=f"person:{admin.get_username()}",
        action=action,
        object=f"mission:{mission_id}",
        payload={"account": account.get_username(), "role": str(role)},
    )
