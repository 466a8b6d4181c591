"""Hooks and deliveries: the one place that writes them (the dashboard, the admin and
``manage.py hooks`` all come here; every change to a hook is audited).

``delivery_receive`` takes a verified, parsed delivery: it loads the quests the fact concerns,
asks ``ephyra.webhooks.webhooks`` for the quest events, and in one transaction stores the delivery
row and hands the events to the inbound queue, which the workspace's worker applies through the
engine. The unique delivery id, not a read before the write, is what makes a redelivery count
once, even when two copies race.

``hook_register``, ``hook_set_enabled`` and ``hook_remove`` are what an admin does on the
dashboard: each checks the person's role and is recorded in the workspace's audit chain. A
secret Ephyra generates for GitHub, Gitea or Forgejo (which sign with it, so Ephyra must read
it) goes to a file of its own under the data directory, mode 0600, and the hook row keeps
only its ``file:`` reference; a GitLab token is kept as a salted digest.

Free text a forge sends (a comment, a check's name, a ref, an environment, a reason that quotes
an event name) is redacted with the OTLP signals' rules before any of it reaches the inbound
queue, the delivery row, the journal or a log line: a person pasting a token into a pull
request comment must not put it in the quest's history.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from ephyra.redaction.redact import redact
from ephyra.webhooks import signatures
from ephyra.webhooks.facts import (
    CheckResult,
    Comment,
    Deployment,
    Fact,
    Ignored,
    Ping,
    Push,
    Review,
)
from ephyra.webhooks.webhooks import (
    SCHEMES,
    OpenQuest,
    concerned,
    for_workspace,
    quest_events,
    selection,
)
from intake.deployments.services import deployment_record
from intake.hooks.credentials import (
    SecretUnavailable,
    file_reference,
    read_secret,
    validate_reference,
)
from intake.models import Hook, ReviewLink, WebhookDelivery
from ledger.audit import audit_append
from ledger.inbound import submit_event
from quests.models import Quest, Workspace
from quests.roles import require

logger = logging.getLogger("ephyra.intake")


@dataclass(frozen=True)
class Receipt:
    """What became of a delivery: ``status`` is the word the forge reads in the response."""

    status: str  # accepted, processed, recorded, ignored, pong or duplicate
    events: int = 0
    reason: str = ""


def hook_create(
    workspace: Workspace, kind: str, *, secret_ref: str | None = None, generate_token: bool = False
) -> tuple[Hook, str | None]:
    """Register a hook. Returns the hook and, with ``generate_token`` (GitLab only), the token
    to paste into GitLab: it is shown once, and only its salted digest is kept."""
    if kind not in SCHEMES:
        raise ValueError(f"unknown forge {kind!r}: use one of {', '.join(SCHEMES)}")
    if (secret_ref is None) == (not generate_token):
        raise ValueError("give exactly one of a secret reference or generate_token")
    if Hook.objects.filter(workspace=workspace, kind=kind).exists():
        raise ValueError(f"workspace {workspace.slug} already has a {kind} hook; remove it first")
    token = None
    if generate_token:
        if kind != "gitlab":
            raise ValueError(
                f"{SCHEMES[kind].label} signs deliveries with the secret itself, so Ephyra must "
                "be able to read it: give --secret-env or --secret-file"
            )
        token = secrets.token_urlsafe(32)
        stored = signatures.hash_token(token, secrets.token_bytes(16))
        hook = Hook.objects.create(workspace=workspace, kind=kind, token_hash=stored)
    else:
        hook = Hook.objects.create(
            workspace=workspace, kind=kind, secret_ref=validate_reference(secret_ref or "")
        )
    return hook, token


def hook_endpoint(hook: Hook) -> str:
    return reverse("intake:receive", kwargs={"kind": hook.kind, "slug": hook.workspace.slug})


def hook_secret_path(workspace: Workspace, kind: str) -> Path:
    """Where a secret Ephyra generated for a workspace's hook is kept."""
    return Path(settings.DATA_DIR).resolve() / "secrets" / f"{workspace.slug}-{kind}.secret"


def hook_register(user, workspace: Workspace, kind: str) -> tuple[Hook, str]:
    """For an admin of the workspace: register a hook with a secret Ephyra generates, audited
    (``hook.created``). Returns the hook and the secret, to show once and paste into the forge.

    GitLab compares the token itself, so only its salted digest is kept (``hook_create``'s
    ``generate_token``). GitHub, Gitea and Forgejo sign each delivery with the secret, so
    Ephyra must read it: it is written to ``hook_secret_path`` (mode 0600, in a folder of mode
    0700) and the row holds the ``file:`` reference. ``ValueError`` for an unknown forge or a
    kind the workspace already has a hook of; then no file is touched."""
    require(user, workspace, "administer")
    if kind not in SCHEMES:
        raise ValueError(f"unknown forge {kind!r}: use one of {', '.join(SCHEMES)}")
    with transaction.atomic():
        locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
        if kind == "gitlab":
            hook, token = hook_create(locked, kind, generate_token=True)
            secret = token or ""
        else:
            secret = secrets.token_urlsafe(32)
            path = hook_secret_path(locked, kind)
            written = _write_private(path.parent, secret)
            try:
                hook, _ = hook_create(locked, kind, secret_ref=file_reference(str(path)))
                # Only now, with the hook's checks passed, may the file of that name change.
                os.replace(written, path)
            except BaseException:
                written.unlink(missing_ok=True)
                raise
        _audit_hook(locked, f"person:{user.get_username()}", "hook.created", hook)
    return hook, secret


def _write_private(directory: Path, secret: str) -> Path:
    """A new file in ``directory`` holding ``secret``, readable by this user only."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=directory, prefix=".", suffix=".tmp")  # mode 0600
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(secret + "\n")
    os.chmod(name, 0o600)  # mkstemp's mode already; said again for a reader of this code
    return Path(name)


def hook_set_enabled(user, hook: Hook, enabled: bool) -> Hook:
    """Take a hook's deliveries again, or refuse them with 404 until enabled; audited
    (``hook.enabled`` / ``hook.disabled``). ``ValueError`` when it already is so."""
    require(user, hook.workspace, "administer")
    return hook_switch(hook, enabled, actor=f"person:{user.get_username()}")


def hook_switch(hook: Hook, enabled: bool, *, actor: str) -> Hook:
    """``hook_set_enabled`` for an operator at the command line (``manage.py hooks``), who has
    the host rather than a role: the same change, audited under ``actor``."""
    with transaction.atomic():
        locked = Workspace.objects.select_for_update().get(pk=hook.workspace_id)
        if not Hook.objects.filter(pk=hook.pk, active=not enabled).update(active=enabled):
            state = "enabled" if enabled else "disabled"
            raise ValueError(f"the {hook.kind} hook of {locked.slug} already is {state}")
        hook.active = enabled
        _audit_hook(locked, actor, "hook.enabled" if enabled else "hook.disabled", hook)
    return hook


def hook_remove(user, hook: Hook) -> None:
    """Delete a hook (its deliveries are kept), audited (``hook.removed``). A secret file
    Ephyra generated for it is deleted once the removal commits; a reference the admin gave
    (``manage.py hooks add --secret-file``) names a file Ephyra does not own and is left."""
    require(user, hook.workspace, "administer")
    hook_delete(hook, actor=f"person:{user.get_username()}")


def hook_delete(hook: Hook, *, actor: str) -> None:
    """``hook_remove`` for an operator at the command line, audited under ``actor``."""
    with transaction.atomic():
        locked = Workspace.objects.select_for_update().get(pk=hook.workspace_id)
        generated = hook_secret_path(locked, hook.kind)
        _audit_hook(locked, actor, "hook.removed", hook)
        Hook.objects.filter(pk=hook.pk).delete()
        if hook.secret_ref == f"file:{generated}":
            transaction.on_commit(lambda: generated.unlink(missing_ok=True))


def hook_secret_hint(hook: Hook) -> str:
    """What a page may say about a hook's secret: its first characters, or why it cannot be
    read (the web process reads it on every delivery, so that is worth knowing now)."""
    if hook.token_hash:
        return "a token Ephyra generated; only its salted digest is kept"
    try:
        secret = read_secret(hook.secret_ref)
    except SecretUnavailable as exc:
        return f"cannot be read: {exc}"
    return f"starts with {secret[:4]}…"


def hook_audit_created(hook: Hook, *, actor: str) -> None:
    """Record in the workspace's audit chain a hook an operator registered at the command line."""
    with transaction.atomic():
        locked = Workspace.objects.select_for_update().get(pk=hook.workspace_id)
        _audit_hook(locked, actor, "hook.created", hook)


def _audit_hook(workspace: Workspace, actor: str, action: str, hook: Hook) -> None:
    audit_append(
        workspace,
        at=timezone.now(),
        actor=actor,
        action=action,
        object=f"hook:{hook.kind}",
        payload={"kind": hook.kind, "secret": hook.secret_ref or "token digest"},
    )


def _load_quests(workspace: Workspace, fact: Fact, linked: list[str]) -> list[OpenQuest]:
    wanted = selection(fact, linked)
    if not wanted:
        return []
    query = Q(state__in=[str(s) for s in wanted.states]) | Q(quest_id__in=sorted(wanted.ids))
    rows = Quest.objects.filter(workspace=workspace).filter(query).values_list("data", flat=True)
    return [OpenQuest.from_dict(data) for data in rows]


def _linked(hook: Hook, fact: Fact) -> list[str]:
    if not isinstance(fact, Comment) or fact.review is None:
        return []
    return list(
        ReviewLink.objects.filter(
            workspace=hook.workspace,
            forge=hook.kind,
            repository=fact.review.repository,
            number=fact.review.number,
        ).values_list("quest_id", flat=True)
    )


def _redact_any(value):
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_any(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_any(v) for v in value]
    return value


def _redacted(fact: Fact) -> Fact:
    """``fact`` with every free-text field redacted (shas, numbers and logins are kept: they
    are what ties the fact to a quest and to a person)."""
    if isinstance(fact, Comment):
        return dataclasses.replace(fact, body=redact(fact.body))
    if isinstance(fact, Ignored):
        return Ignored(redact(fact.reason))
    if isinstance(fact, Push):
        return dataclasses.replace(fact, ref=redact(fact.ref))
    if isinstance(fact, Review):
        return dataclasses.replace(fact, action=redact(fact.action))
    if isinstance(fact, Deployment):
        return dataclasses.replace(fact, environment=redact(fact.environment))
    if isinstance(fact, CheckResult):
        return dataclasses.replace(
            fact,
            name=redact(fact.name),
            conclusion=redact(fact.conclusion),
            details=_redact_any(fact.details),
        )
    return fact


def _details(fact: Fact) -> dict:
    if isinstance(fact, Ignored):
        return {"reason": fact.reason}
    if isinstance(fact, Push):
        return {"ref": fact.ref, "before": fact.before, "after": fact.after}
    if isinstance(fact, Comment) and fact.review is not None:
        return {"repository": fact.review.repository, "number": fact.review.number}
    if isinstance(fact, Review):
        return {
            "repository": fact.ref.repository,
            "number": fact.ref.number,
            "action": fact.action,
            "head": fact.head,
        }
    if isinstance(fact, Deployment):
        return {
            "sha": fact.sha,
            "environment": fact.environment,
            "production": fact.to_production,
            "at": _iso(fact.at),
        }
    if isinstance(fact, CheckResult):
        return {
            "sha": fact.sha,
            "name": fact.name,
            "conclusion": fact.conclusion,
            "at": _iso(fact.at),
            **fact.details,
        }
    return {}


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None


def _deployment_receive(
    workspace: Workspace, hook: Hook, delivery_id: str, fact: Deployment, received_at: datetime
) -> Receipt:
    """Hand a deployment to its service; the delivery row says what became of it."""
    recorded = deployment_record(
        workspace,
        commit=fact.sha,
        environment=fact.environment,
        source=f"webhook:{hook.kind}",
        at=fact.at or received_at,
        actor=fact.actor,
        production=fact.to_production,
    )
    row = recorded.deployment
    told = list(recorded.applied)
    delivery = WebhookDelivery.objects.get(
        workspace=workspace, forge=hook.kind, delivery_id=delivery_id
    )
    delivery.quests = list(row.quests)
    delivery.events = len(told)
    delivery.details = {**delivery.details, "deployment": row.state, "reason": row.reason}
    if not told:
        delivery.outcome = WebhookDelivery.Outcome.RECORDED
    delivery.save(update_fields=["quests", "events", "details", "outcome"])
    return Receipt("accepted", len(told)) if told else Receipt("recorded")


def delivery_receive(
    hook: Hook, *, delivery_id: str, event: str, fact: Fact, received_at: datetime
) -> Receipt:
    """Store the delivery and submit its quest events, once per delivery id."""
    workspace = hook.workspace
    scheme = SCHEMES[hook.kind]
    event = redact(event)  # a header the forge chose: it is stored and logged
    fact = _redacted(for_workspace(fact, workspace.base_branch))
    quests = _load_quests(workspace, fact, _linked(hook, fact))
    # A deployment becomes no event here: its own service decides it, below.
    events = quest_events(
        fact, quests, prefix=scheme.prefix, delivery=delivery_id, received_at=received_at
    )
    if events:
        outcome, receipt = WebhookDelivery.Outcome.PROCESSED, Receipt("accepted", len(events))
        about = sorted({e.quest for e in events})
    elif isinstance(fact, Push | Comment):
        outcome, receipt = WebhookDelivery.Outcome.PROCESSED, Receipt("processed")
        about = []
    elif isinstance(fact, Deployment):
        outcome, receipt, about = WebhookDelivery.Outcome.PROCESSED, Receipt("processed"), []
    elif isinstance(fact, CheckResult | Review):
        about = concerned(fact, quests)
        if isinstance(fact, Review) and not about:
            outcome = WebhookDelivery.Outcome.IGNORED
            receipt = Receipt("ignored", reason="the pull request names no quest of this workspace")
        else:
            outcome, receipt = WebhookDelivery.Outcome.RECORDED, Receipt("recorded")
    elif isinstance(fact, Ping):
        outcome, receipt, about = WebhookDelivery.Outcome.IGNORED, Receipt("pong"), []
    else:
        reason = fact.reason if isinstance(fact, Ignored) else "nothing to do"
        outcome, receipt, about = (
            WebhookDelivery.Outcome.IGNORED,
            Receipt("ignored", reason=reason),
            [],
        )
    details = _details(fact)
    if receipt.reason and "reason" not in details:
        details["reason"] = receipt.reason

    with transaction.atomic():
        try:
            with transaction.atomic():
                WebhookDelivery.objects.create(
                    workspace=workspace,
                    hook=hook,
                    forge=hook.kind,
                    delivery_id=delivery_id,
                    event=event,
                    received_at=received_at,
                    outcome=outcome,
                    events=len(events),
                    quests=about,
                    details=details,
                )
        except IntegrityError:
            logger.info("%s delivery %s to %s: duplicate", hook.kind, delivery_id, workspace.slug)
            return Receipt("duplicate")
        if isinstance(fact, Deployment):
            receipt = _deployment_receive(workspace, hook, delivery_id, fact, received_at)
        if isinstance(fact, Review) and about:
            ReviewLink.objects.bulk_create(
                [
                    ReviewLink(
                        workspace=workspace,
                        forge=hook.kind,
                        repository=fact.ref.repository,
                        number=fact.ref.number,
                        quest_id=quest_id,
                    )
                    for quest_id in about
                ],
                ignore_conflicts=True,
            )
        for quest_event in events:
            submit_event(workspace, quest_event, source=f"webhook:{hook.kind}")
    logger.info(
        "%s delivery %s (%s) to %s: %s, %d quest events",
        hook.kind,
        delivery_id,
        event,
        workspace.slug,
        receipt.status,
        receipt.events,
    )
    return receipt
