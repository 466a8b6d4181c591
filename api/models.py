"""Personal API tokens and the answers kept for idempotency keys."""

from django.conf import settings
from django.contrib.auth.models import User
from django.db import models

from quests.roles import Role


class ApiToken(models.Model):
    """A person's token for the API: ``eph_`` and a random key, shown once. Stored as a salted
    SHA-256 with its first characters (``prefix``) to find it; scoped to workspaces and one
    role, which cap the owner's own roles; it expires."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=12, unique=True)
    digest = models.CharField(max_length=200)
    workspaces = models.JSONField(help_text="The slugs of the workspaces the token may reach.")
    role = models.CharField(max_length=10, choices=[(r.value, r.value) for r in Role])
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user_id})"


class IdempotentAnswer(models.Model):
    """The answer given to a write sent with an ``Idempotency-Key``: the same key and the same
    request again get it back; the same key with another request is refused."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    fingerprint = models.CharField(max_length=64)  # SHA-256 of method, path and body
    status = models.PositiveSmallIntegerField()
    body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="api_idempotency_unique_key")
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.key}"


class TokenActor(User):
    """The owner of a token as the token lets them act: the same account (the actor of every
    event and audit entry), holding only the roles the token leaves them (``api.auth``)."""

    class Meta:
        proxy = True

    def __getattribute__(self, name: str):
        # The role checks read ``user.groups``: here, only the role groups the token leaves.
        # (A property named groups would clash with the field, which Django's checks refuse.)
        if name == "groups":
            from django.contrib.auth.models import Group

            return Group.objects.filter(name__in=object.__getattribute__(self, "token_groups"))
        return object.__getattribute__(self, name)
