"""Who may do what in a workspace: three roles, held as Django groups per workspace.

- **reviewer**: claims reviews, comments, decides checkpoints, pauses and resumes quests;
- **admin**: everything a reviewer does, and kills quests, manages the workspace (tokens, hooks,
  policy proposals and their approval, ledger resolution);
- **staff**: reads everything, the audit trail included; decides nothing.

A person may hold different roles in different workspaces (review one, only read another). The
group of a role in a workspace is named ``<workspace slug>:<role>``; a superuser holds every role
everywhere. ``manage.py roles`` grants and revokes them; the admin shows the groups.
"""

from __future__ import annotations

from enum import StrEnum

from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied

from quests.models import Workspace


class Role(StrEnum):
    REVIEWER = "reviewer"
    ADMIN = "admin"
    STAFF = "staff"


ROLE_NAMES = frozenset(role.value for role in Role)


# Each action a person can take on a quest or a workspace, and the roles that may take it.
_DECIDERS = frozenset({Role.REVIEWER, Role.ADMIN})
ALLOWED: dict[str, frozenset[Role]] = {
    "read": frozenset(Role),
    "claim": _DECIDERS,
    "release": _DECIDERS,
    "decide": _DECIDERS,
    "comment": _DECIDERS,
    "pause": _DECIDERS,
    "resume": _DECIDERS,
    "revise": _DECIDERS,
    "kill": frozenset({Role.ADMIN}),
    "administer": frozenset({Role.ADMIN}),
    "audit": frozenset({Role.ADMIN, Role.STAFF}),
}


def group_name(workspace: Workspace, role: Role) -> str:
    return f"{workspace.slug}:{role}"


def roles_of(user, workspace: Workspace) -> frozenset[Role]:
    """The roles ``user`` holds in ``workspace`` (every role for a superuser, none for an
    anonymous or inactive user)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return frozenset()
    if user.is_superuser:
        return frozenset(Role)
    prefix = f"{workspace.slug}:"
    names = user.groups.filter(name__startswith=prefix).values_list("name", flat=True)
    held = (name[len(prefix) :] for name in names)
    return frozenset(Role(role) for role in held if role in ROLE_NAMES)


def workspace_roles(user) -> dict[str, frozenset[Role]]:
    """Every workspace ``user`` holds a role in, by slug, in one query (superuser: all)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return {}
    if user.is_superuser:
        return {slug: frozenset(Role) for slug in Workspace.objects.values_list("slug", flat=True)}
    held: dict[str, set[Role]] = {}
    for name in user.groups.values_list("name", flat=True):
        slug, _, role = name.rpartition(":")
        if slug and role in ROLE_NAMES:
            held.setdefault(slug, set()).add(Role(role))
    return {slug: frozenset(roles) for slug, roles in held.items()}


def may(user, workspace: Workspace, action: str) -> bool:
    return allows(roles_of(user, workspace), action)


def allows(roles: frozenset[Role], action: str) -> bool:
    """Whether holding ``roles`` allows ``action`` (for a caller that read the roles once)."""
    return bool(roles & ALLOWED[action])


def require(user, workspace: Workspace, action: str) -> None:
    """Raise ``PermissionDenied`` unless ``user`` may take ``action`` in ``workspace``."""
    if not may(user, workspace, action):
        needed = " or ".join(sorted(ALLOWED[action]))
        raise PermissionDenied(f"{action} in {workspace.slug} needs the role {needed}")


def role_grant(user, workspace: Workspace, role: Role) -> bool:
    """Give ``user`` ``role`` in ``workspace``; False if they held it already."""
    group, _ = Group.objects.get_or_create(name=group_name(workspace, Role(role)))
    if user.groups.filter(pk=group.pk).exists():
        return False
    user.groups.add(group)
    return True


def role_revoke(user, workspace: Workspace, role: Role) -> bool:
    """Take ``role`` in ``workspace`` from ``user``; False if they did not hold it."""
    group = Group.objects.filter(name=group_name(workspace, Role(role))).first()
    if group is None or not user.groups.filter(pk=group.pk).exists():
        return False
    user.groups.remove(group)
    return True


def role_groups_create(workspace: Workspace) -> None:
    """The workspace's three groups, so the admin lists them before anyone holds a role."""
    for role in Role:
        Group.objects.get_or_create(name=group_name(workspace, role))
