"""Policy versions and proposals: the reviewed autonomy policy texts of a workspace, and the
four-eyes step that makes one of them current.

The one writer of ``PolicyVersion`` and ``PolicyProposal`` rows and of ``Workspace.policy``. A
version is immutable: its digest is the hash of its exact text, and the journal and the audit
log name a policy by that digest. A version becomes current only when a proposal of it is
approved by an admin of the workspace other than the one who proposed it; the workspace's
worker reads the current version afresh with each batch of events, so nothing else it could
load exists. Every proposal, approval, rejection and withdrawal is audited in the workspace's
hash chain with the person's account as the actor.

A workspace has at most one open proposal: a second one is refused until the first is
approved, rejected or withdrawn, so an approver always sees the one change they are asked to
approve against the policy it would replace.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone

from ephyra.policy import parse_policy
from ephyra.policy.autonomy import policy_digest
from ledger.audit import audit_append
from quests.models import PolicyProposal, PolicyVersion, Workspace
from quests.roles import require

PROPOSED = "policy.proposed"
APPROVED = "policy.approved"
REJECTED = "policy.rejected"
WITHDRAWN = "policy.withdrawn"
NOTE_LIMIT = 2000  # characters, for a proposal's note and a rejection's reason


class PolicyDuplicate(ValueError):
    """The workspace already has a version with exactly this text."""


class PolicyRefused(ValueError):
    """A proposal step that was not taken, and why, in words for the person."""


class OwnProposal(PermissionDenied):
    """Four eyes: the person who proposed a change may not approve it."""


def policy_version_add(workspace: Workspace, text: str, *, reviewed_by: str) -> PolicyVersion:
    """Store a reviewed policy text as a new version of the workspace's policy (it does not
    become current: that takes an approved proposal).

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


def policy_propose(user, workspace: Workspace, text: str, note: str = "") -> PolicyProposal:
    """Propose ``text`` as the workspace's policy. The text is checked exactly as the worker
    parses it (``PolicyError`` lists every problem with its line) and stored as a version; a
    text the workspace already has as an earlier version proposes that version again.

    Raises ``PermissionDenied`` for a person who is not an admin of the workspace and
    ``PolicyRefused`` when the text already is the current policy, the note is too long, or
    another proposal is open. A refusal stores nothing."""
    require(user, workspace, "administer")
    note = _text(note, "note")
    parse_policy(text, source="policy")
    digest = policy_digest(text)
    with transaction.atomic():
        locked = _lock(workspace)
        version = PolicyVersion.objects.filter(workspace=locked, digest=digest).first()
        if version is None:
            version = PolicyVersion.objects.create(
                workspace=locked, digest=digest, text=text, reviewed_by=user.get_username()
            )
        return _propose(user, locked, version, note)


def policy_propose_version(user, version: PolicyVersion, note: str = "") -> PolicyProposal:
    """Propose an existing version (an earlier one: a roll back) as its workspace's current
    policy; approved the same way as a new text. Refusals as for ``policy_propose``."""
    require(user, version.workspace, "administer")
    note = _text(note, "note")
    with transaction.atomic():
        return _propose(user, _lock(version.workspace), version, note)


def policy_approve(user, proposal: PolicyProposal) -> PolicyProposal:
    """Approve an open proposal: its version becomes the workspace's current policy, which the
    worker loads with its next batch of events.

    Raises ``PermissionDenied`` for a person who is not an admin of the workspace,
    ``OwnProposal`` (a ``PermissionDenied``) for the person who proposed it, and
    ``PolicyRefused`` when the proposal is no longer open. A refusal changes nothing."""
    require(user, proposal.workspace, "administer")
    with transaction.atomic():
        workspace = _lock(proposal.workspace)
        proposal = _open(proposal)
        if proposal.proposed_by_id == user.pk:
            raise OwnProposal(
                f"you proposed this change (proposal #{proposal.pk}); four eyes: another admin "
                f"of {workspace.slug} must approve it"
            )
        previous = workspace.policy.digest if workspace.policy_id else None
        workspace.policy = proposal.version
        workspace.save(update_fields=["policy"])
        _decide(proposal, user, PolicyProposal.State.APPROVED)
        _audit(
            workspace,
            user,
            APPROVED,
            proposal,
            previous=previous,
            proposed_by=proposal.proposed_by.get_username(),
        )
    proposal.workspace = workspace
    return proposal


def policy_reject(user, proposal: PolicyProposal, reason: str) -> PolicyProposal:
    """Reject an open proposal, with a reason; any admin of the workspace may. The current
    policy stays as it is."""
    require(user, proposal.workspace, "administer")
    reason = _text(reason, "reason", required=True)
    with transaction.atomic():
        workspace = _lock(proposal.workspace)
        proposal = _open(proposal)
        _decide(proposal, user, PolicyProposal.State.REJECTED, reason=reason)
        _audit(workspace, user, REJECTED, proposal, reason=reason)
    return proposal


def policy_withdraw(user, proposal: PolicyProposal, reason: str = "") -> PolicyProposal:
    """The proposer takes back their open proposal (to propose a corrected text, say)."""
    require(user, proposal.workspace, "administer")
    reason = _text(reason, "reason")
    with transaction.atomic():
        workspace = _lock(proposal.workspace)
        proposal = _open(proposal)
        if proposal.proposed_by_id != user.pk:
            raise PolicyRefused(
                f"only {proposal.proposed_by.get_username()}, who proposed it, may withdraw "
                f"proposal #{proposal.pk}; reject it with a reason instead"
            )
        _decide(proposal, user, PolicyProposal.State.WITHDRAWN, reason=reason)
        _audit(workspace, user, WITHDRAWN, proposal, reason=reason)
    return proposal


def _lock(workspace: Workspace) -> Workspace:
    """The workspace row, locked: the audit chain's append and the one-open-proposal check
    both need it."""
    return Workspace.objects.select_for_update().get(pk=workspace.pk)


def _open(proposal: PolicyProposal) -> PolicyProposal:
    """The proposal as stored now, locked, if it is still open (a second click, or a page
    older than someone else's decision, finds it decided)."""
    fresh = (
        # Only the proposal's row is locked ("self"): PostgreSQL cannot lock the nullable side
        # of the outer join to its decider.
        PolicyProposal.objects.select_for_update(of=("self",))
        .select_related("version", "proposed_by", "decided_by")
        .get(pk=proposal.pk)
    )
    if fresh.state != PolicyProposal.State.OPEN:
        by = f" by {fresh.decided_by.get_username()}" if fresh.decided_by_id else ""
        raise PolicyRefused(f"proposal #{fresh.pk} is already {fresh.state}{by}")
    return fresh


def _propose(user, workspace: Workspace, version: PolicyVersion, note: str) -> PolicyProposal:
    if version.workspace_id != workspace.pk:
        raise PolicyRefused("that version belongs to another workspace")
    if workspace.policy_id == version.pk:
        raise PolicyRefused(
            f"this text already is the current policy of {workspace.slug} ({version.digest[:19]}…)"
        )
    waiting = (
        PolicyProposal.objects.filter(workspace=workspace, state=PolicyProposal.State.OPEN)
        .select_related("proposed_by")
        .first()
    )
    if waiting is not None:
        raise PolicyRefused(_one_open(workspace, waiting))
    try:
        with transaction.atomic():
            proposal = PolicyProposal.objects.create(
                workspace=workspace, version=version, proposed_by=user, note=note
            )
    except IntegrityError:  # another admin's proposal committed between the check and here
        raise PolicyRefused(f"{workspace.slug} already has an open proposal") from None
    _audit(
        workspace,
        user,
        PROPOSED,
        proposal,
        current=workspace.policy.digest if workspace.policy_id else None,
        note=note,
    )
    return proposal


def _one_open(workspace: Workspace, waiting: PolicyProposal) -> str:
    return (
        f"{workspace.slug} already has an open proposal (#{waiting.pk}, by "
        f"{waiting.proposed_by.get_username()}): it must be approved, rejected or withdrawn "
        "before another is made"
    )


def _decide(proposal: PolicyProposal, user, state: str, *, reason: str = "") -> None:
    proposal.state = state
    proposal.decided_by = user
    proposal.decided_at = timezone.now()
    proposal.reason = reason
    proposal.save(update_fields=["state", "decided_by", "decided_at", "reason"])


def _audit(workspace: Workspace, user, action: str, proposal: PolicyProposal, **more) -> None:
    audit_append(
        workspace,
        at=timezone.now(),
        actor=f"person:{user.get_username()}",
        action=action,
        object=f"workspace:{workspace.slug}",
        payload={"proposal": proposal.pk, "digest": proposal.version.digest, **more},
    )


def _text(value: str, name: str, *, required: bool = False) -> str:
    value = (value or "").strip()
    if required and not value:
        raise PolicyRefused(f"a {name} is required")
    if len(value) > NOTE_LIMIT:
        raise PolicyRefused(f"the {name} is {len(value)} characters; at most {NOTE_LIMIT}")
    return value
