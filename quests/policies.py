"""Policy versions: the reviewed autonomy policy texts of a workspace, and which one is current.

The one writer of ``PolicyVersion`` rows and of ``Workspace.policy``; the admin calls it. A
version is immutable: its digest is the hash of its exact text, and the journal and the audit
log name a policy by that digest. Making a version current is a separate, audited step, and the
workspace's worker reads the current version afresh with each batch of events.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from ephyra.policy import parse_policy
from ephyra.policy.autonomy import policy_digest
from ledger.audit import audit_append
from quests.models import PolicyVersion, Workspace

POLICY_SET_ACTION = "workspace.policy_set"


class PolicyDuplicate(ValueError):
    """The workspace already has a version with exactly this text."""


def policy_version_add(workspace: Workspace, text: str, *, reviewed_by: str) -> PolicyVersion:
    """Store a reviewed policy text as a new version of the workspace's policy.

    Raises ``PolicyError`` (its ``problems`` carry the line of each) when the text is not a
    valid policy, and ``PolicyDuplicate`` when the workspace already has this exact text."""
    parse_policy(text, source="policy")
    digest = policy_digest(text)
    duplicate = PolicyDuplicate(
        f"{workspace.slug} already has this exact policy text (version {digest[:19]}…)"
    )
    if PolicyVersion.objects.filter(workspace=workspace, digest=digest).exists():
        raise duplicate
    try:
        with transaction.atomic():
            return PolicyVersion.objects.create(
                workspace=workspace, digest=digest, text=text, reviewed_by=reviewed_by
            )
    except IntegrityError:  # the same text added at the same moment by someone else
        raise duplicate from None


def policy_set_current(version: PolicyVersion, *, actor: str) -> bool:
    """Make ``version`` its workspace's current policy, audited in the workspace's log.
    False (and nothing written) when it already is."""
    with transaction.atomic():
        workspace = Workspace.objects.select_for_update().get(pk=version.workspace_id)
        if workspace.policy_id == version.pk:
            return False
        previous = workspace.policy.digest if workspace.policy_id else None
        workspace.policy = version
        workspace.save(update_fields=["policy"])
        audit_append(
            workspace,
            at=timezone.now(),
            actor=actor,
            action=POLICY_SET_ACTION,
            object=f"workspace:{workspace.slug}",
            payload={"digest": version.digest, "previous": previous},
        )
    return True
