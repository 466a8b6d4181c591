"""``manage.py api_tokens``: personal API tokens from the command line.

    api_tokens create USER --workspace WS [--workspace WS2] [--role reviewer] [--days 90] [--name N]
    api_tokens list [--user USER]
    api_tokens revoke PREFIX

``create`` prints the token once (only its digest is kept). Creating and revoking are audited
in each workspace the token names, with the token's owner as the actor.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from api.models import ApiToken
from api.tokens import DEFAULT_DAYS, TokenRefused, token_create, token_revoke
from quests.roles import Role


class Command(BaseCommand):
    help = "Create, list and revoke personal API tokens."

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="make a token for USER (printed once)")
        create.add_argument("user")
        create.add_argument("--workspace", action="append", required=True, dest="workspaces")
        create.add_argument("--role", choices=[r.value for r in Role], default=Role.REVIEWER.value)
        create.add_argument("--days", type=int, default=DEFAULT_DAYS)
        create.add_argument("--name", default="")
        listing = sub.add_parser("list", help="every token (or USER's), without the secrets")
        listing.add_argument("--user")
        revoke = sub.add_parser("revoke", help="stop accepting a token")
        revoke.add_argument("prefix", help="the token's first 12 characters (eph_...)")

    def handle(self, *args, action: str, **options) -> None:
        getattr(self, f"_{action}")(**options)

    def _create(self, user: str, workspaces: list[str], role: str, days: int, name: str, **_):
        owner = self._person(user)
        try:
            issued = token_create(owner, workspaces=workspaces, role=role, days=days, name=name)
        except TokenRefused as exc:
            raise CommandError(str(exc)) from None
        row = issued.row
        self.stderr.write(
            f"token {row.prefix}… for {user}: {role} in {', '.join(row.workspaces)}, "
            f"expires {row.expires_at:%Y-%m-%d %H:%M} UTC; shown once:"
        )
        self.stdout.write(issued.token)

    def _list(self, user: str | None, **_) -> None:
        rows = ApiToken.objects.select_related("user").order_by("user__username", "-created_at")
        if user:
            rows = rows.filter(user=self._person(user))
        now = timezone.now()
        for row in rows:
            state = (
                "revoked" if row.revoked_at else ("expired" if row.expires_at <= now else "live")
            )
            self.stdout.write(
                f"{row.prefix}  {row.user.get_username()}  {row.role}  "
                f"{','.join(row.workspaces)}  expires {row.expires_at:%Y-%m-%d}  {state}"
                + (f"  {row.name}" if row.name else "")
            )

    def _revoke(self, prefix: str, **_) -> None:
        row = ApiToken.objects.select_related("user").filter(prefix=prefix).first()
        if row is None:
            raise CommandError(f"no token {prefix!r}")
        try:
            token_revoke(row.user, row)
        except TokenRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"revoked {row.prefix}… of {row.user.get_username()}")

    @staticmethod
    def _person(username: str):
        try:
            return get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user {username!r}") from None
