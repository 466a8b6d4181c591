"""Workspaces: registering a repository, and reaching a workspace's journal and policy.

A workspace is a repository Ephyra works on. Its quests are journaled in a mirror of it under
the data directory; its current reviewed policy decides how they move.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pygit2
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from ephyra.core.rules import MachinePolicy
from ephyra.policy import AutonomyPolicy, default_policy, parse_policy
from journal.store import Journal
from ledger.audit import audit_append
from quests.models import Workspace
from quests.roles import Role, role_grant, role_groups_create


def workspace_create(
    slug: str, source: str, *, base_branch: str = "main", name: str = ""
) -> Workspace:
    """Register a repository: mirror it under the data directory, where its journals live, and
    remember the source as the remote the journals are pushed to."""
    if urlsplit(source).password:
        # Secrets never reach the database (the remote is stored) or Git's config.
        raise ValueError(
            "the repository URL carries a password; give it without credentials and let git's "
            "credential helper supply them"
        )
    mirror = Path(settings.DATA_DIR) / "mirrors" / f"{slug}.git"
    if mirror.exists():
        raise ValueError(f"{mirror} already exists")
    mirror.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["git", "clone", "--quiet", "--mirror", source, str(mirror)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ValueError(f"cannot mirror {source}: {done.stderr.strip()}")
    branches = subprocess.run(
        [
            "git",
            "--git-dir",
            str(mirror),
            "for-each-ref",
            "--format=%(refname:lstrip=2)",
            "refs/heads/",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if base_branch not in branches:
        shutil.rmtree(mirror)  # refused: nothing is left behind
        there = f"its branches: {', '.join(branches)}" if branches else "it has no branches"
        raise ValueError(f"{source} has no branch {base_branch!r}; {there}")
    return Workspace.objects.create(
        slug=slug, name=name or slug, repository=str(mirror), base_branch=base_branch, remote=source
    )


def workspace_set_journal_remote(workspace: Workspace, remote: str, *, actor: str) -> Workspace:
    """Name where the worker pushes the journals (``""``: nowhere). A path or URL without
    credentials: a password would reach the database; git's helper or the credentials file
    supplies it. Audited as ``workspace.journal_remote``."""
    remote = remote.strip()
    if remote.startswith("-"):
        raise ValueError("a journal remote does not start with '-'")
    if urlsplit(remote).password:
        raise ValueError(
            "the journal remote URL carries a password; give it without credentials and let "
            "git's credential helper or EPHYRA_GIT_CREDENTIALS_FILE supply them"
        )
    if remote and "://" not in remote and ":" not in remote.split("/", 1)[0]:
        remote = str(Path(remote).resolve())  # a path: relative to nothing later
    with transaction.atomic():
        locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
        before = locked.journal_remote
        locked.journal_remote = remote
        locked.save(update_fields=["journal_remote"])
        audit_append(
            locked,
            at=timezone.now(),
            actor=actor,
            action="workspace.journal_remote",
            object=f"workspace:{locked.slug}",
            payload={"from": before, "to": remote},
        )
    return locked


_journals = threading.local()


def workspace_journal(workspace: Workspace) -> Journal:
    """The workspace's journal, one open repository per thread (pygit2 objects are not shared
    between threads), so its reference and tree caches stay warm across events."""
    cache = _journals.__dict__.setdefault("by_path", {})
    journal = cache.get(workspace.repository)
    if journal is None:
        journal = cache[workspace.repository] = Journal(Path(workspace.repository))
    return journal


@functools.lru_cache(maxsize=64)
def _policy(text: str | None, source: str) -> AutonomyPolicy:
    return default_policy() if text is None else parse_policy(text, source)


@functools.lru_cache(maxsize=64)
def _machine_policy(text: str | None, source: str) -> MachinePolicy:
    return _policy(text, source).machine()


def workspace_policy_document(workspace: Workspace) -> AutonomyPolicy:
    """The workspace's current reviewed policy, whole (the default when none): triage, proof
    and watch rules as well as the machine's. Parsed once per policy text."""
    if workspace.policy_id is None:
        return _policy(None, "default")
    return _policy(workspace.policy.text, f"policy {workspace.policy.digest}")


def workspace_policy(workspace: Workspace) -> MachinePolicy:
    """The machine view of the workspace's current reviewed policy (the default when none).
    Parsed once per policy text: a reviewed version never changes, a new one has a new text."""
    if workspace.policy_id is None:
        return _machine_policy(None, "default")
    return _machine_policy(workspace.policy.text, f"policy {workspace.policy.digest}")


def workspace_add(
    user, slug: str, source: str, *, base_branch: str = "main", name: str = ""
) -> Workspace:
    """``workspace_create`` for a person on the dashboard: a superuser, or an account with
    Django's ``quests.add_workspace`` permission. The workspace's three role groups are made,
    its creator becomes its admin (a superuser already holds every role), and its audit chain
    starts with ``workspace.created``. ``PermissionDenied`` without the permission;
    ``ValueError`` (in words for the person) for a refused repository, branch or slug."""
    if not user.has_perm("quests.add_workspace"):
        raise PermissionDenied(
            "adding a workspace needs a superuser or the permission quests.add_workspace"
        )
    if Workspace.objects.filter(slug=slug).exists():
        raise ValueError(f"workspace {slug!r} already exists")
    if source.startswith("-"):
        raise ValueError("a repository path or URL does not start with '-'")
    if Path(source).is_dir():
        # A path is kept as the remote the journals are pushed to: relative to nothing later.
        source = str(Path(source).resolve())
    workspace = workspace_create(slug, source, base_branch=base_branch, name=name)
    with transaction.atomic():
        locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
        role_groups_create(locked)
        if not user.is_superuser:
            role_grant(user, locked, Role.ADMIN)
        audit_append(
            locked,
            at=timezone.now(),
            actor=f"person:{user.get_username()}",
            action="workspace.created",
            object=f"workspace:{slug}",
            payload={"remote": source, "base_branch": base_branch},
        )
    return workspace


def commit_of(workspace: Workspace, name: str) -> str | None:
    """The full commit id ``name`` (a ref, a commit or a prefix of one) resolves to in the
    workspace's mirror, or None when the mirror has no such commit."""
    if not name or name.startswith("-"):
        return None  # never an option to git
    done = subprocess.run(
        ["git", "--git-dir", workspace.repository, "rev-parse", "--verify", "--quiet",
         f"{name}^{{commit}}"],
        capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 else None


def commit_contains(workspace: Workspace, deployed: str, landed: str) -> bool | None:
    """Whether a deployed commit carries a landed one, asked of the workspace's mirror: True
    when ``landed`` is ``deployed`` or one of its ancestors, False when it is not, and None when
    the mirror cannot tell (it cannot be opened, or lacks either commit: a deployment of a
    commit not fetched yet). A forge says which commit it deployed, not what that commit
    contains; only full commit ids are looked up, a prefix is not guessed."""
    if deployed == landed:
        return True
    try:
        repo = pygit2.Repository(workspace.repository)
        deployed_oid, landed_oid = pygit2.Oid(hex=deployed), pygit2.Oid(hex=landed)
        if deployed_oid not in repo or landed_oid not in repo:
            return None
        return repo.descendant_of(deployed_oid, landed_oid)
    except (pygit2.GitError, ValueError, KeyError):
        return None
