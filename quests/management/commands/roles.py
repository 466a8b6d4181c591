"""``manage.py roles``: who holds which role in which workspace.

    roles grant USER WORKSPACE reviewer|admin|staff
    roles revoke USER WORKSPACE ROLE
    roles list [--workspace SLUG]
    roles setup                      create every workspace's three groups
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from quests.models import Workspace
from quests.roles import Role, role_grant, role_groups_create, role_revoke


class Command(BaseCommand):
    help = "Grant, revoke and list people's roles (reviewer, admin, staff) per workspace."

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        for name in ("grant", "revoke"):
            one = sub.add_parser(name, help=f"{name} a role")
            one.add_argument("user", help="user name")
            one.add_argument("workspace", help="workspace slug")
            one.add_argument("role", choices=[r.value for r in Role])
        listing = sub.add_parser("list", help="the holders of each role")
        listing.add_argument("--workspace")
        sub.add_parser("setup", help="create the groups of every workspace")

    def handle(self, *args, action: str, **options) -> None:
        getattr(self, f"_{action}")(**options)

    def _grant(self, user: str, workspace: str, role: str, **_) -> None:
        person, ws = self._person(user), self._workspace(workspace)
        done = role_grant(person, ws, Role(role))
        self.stdout.write(f"{user} {'is now' if done else 'was already'} {role} in {workspace}")

    def _revoke(self, user: str, workspace: str, role: str, **_) -> None:
        person, ws = self._person(user), self._workspace(workspace)
        done = role_revoke(person, ws, Role(role))
        self.stdout.write(f"{user} {'is no longer' if done else 'was not'} {role} in {workspace}")

    def _list(self, workspace: str | None, **_) -> None:
        slugs = [workspace] if workspace else Workspace.objects.values_list("slug", flat=True)
        for slug in sorted(slugs):
            ws = self._workspace(slug)
            for role in Role:
                group = Group.objects.filter(name=f"{ws.slug}:{role}").first()
                names = sorted(group.user_set.values_list("username", flat=True)) if group else []
                self.stdout.write(f"{ws.slug} {role}: {', '.join(names) or '-'}")

    def _setup(self, **_) -> None:
        for ws in Workspace.objects.order_by("slug"):
            role_groups_create(ws)
            self.stdout.write(f"{ws.slug}: groups {', '.join(f'{ws.slug}:{r}' for r in Role)}")

    @staticmethod
    def _person(username: str):
        person = get_user_model().objects.filter(username=username).first()
        if person is None:
            raise CommandError(f"no user {username!r}: create it with createsuperuser or the admin")
        return person

    @staticmethod
    def _workspace(slug: str) -> Workspace:
        ws = Workspace.objects.filter(slug=slug).first()
        if ws is None:
            raise CommandError(f"no workspace {slug!r}")
        return ws
