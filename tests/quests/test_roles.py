import pytest
from django.core.exceptions import PermissionDenied

from quests.roles import Role, may, require, role_grant, role_revoke, roles_of, workspace_roles
from tests.quests.conftest import person


def test_a_role_is_held_in_one_workspace_and_not_in_another(workspace, other_workspace):
    ann = person("ann", shop=[Role.REVIEWER], other=[Role.STAFF])
    assert roles_of(ann, workspace) == {Role.REVIEWER}
    assert roles_of(ann, other_workspace) == {Role.STAFF}
    assert may(ann, workspace, "decide")
    assert not may(ann, other_workspace, "decide")
    assert may(ann, other_workspace, "read")
    assert workspace_roles(ann) == {"shop": {Role.REVIEWER}, "other": {Role.STAFF}}


def test_only_an_admin_kills_and_staff_decide_nothing(workspace):
    rev, adm, staff = (
        person("rev", shop=[Role.REVIEWER]),
        person("adm", shop=[Role.ADMIN]),
        person("stf", shop=[Role.STAFF]),
    )
    assert not may(rev, workspace, "kill") and may(adm, workspace, "kill")
    for action in ("claim", "decide", "comment", "pause", "kill"):
        assert not may(staff, workspace, action), action
    assert may(staff, workspace, "audit") and not may(rev, workspace, "audit")
    with pytest.raises(PermissionDenied, match="kill in shop needs the role admin"):
        require(rev, workspace, "kill")


def test_a_revoked_role_is_gone_and_a_person_without_roles_reads_nothing(workspace):
    ann = person("ann", shop=[Role.REVIEWER])
    assert role_grant(ann, workspace, Role.REVIEWER) is False  # held already
    assert role_revoke(ann, workspace, Role.REVIEWER) is True
    assert roles_of(ann, workspace) == frozenset()
    assert not may(ann, workspace, "read")
    assert role_revoke(ann, workspace, Role.REVIEWER) is False


def test_the_roles_command_grants_lists_and_revokes(workspace):
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    person("ann")
    out = StringIO()
    call_command("roles", "grant", "ann", "shop", "reviewer", stdout=out)
    call_command("roles", "list", stdout=out)
    call_command("roles", "revoke", "ann", "shop", "reviewer", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "ann is now reviewer in shop"
    assert "shop reviewer: ann" in lines
    assert lines[-1] == "ann is no longer reviewer in shop"
    with pytest.raises(CommandError, match="no user 'zed'"):
        call_command("roles", "grant", "zed", "shop", "admin")
