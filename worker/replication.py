"""Journal replication: the journals leave the host's disk after every group of transitions,
and a worker that takes a workspace over starts from the remote's journals, never from less.

- ``Replicator.push_moved`` pushes the journal refs (``refs/ephyra/*``: quests, missions, audit
  anchors) that moved since the remote last confirmed them: a plain push, never forced
  (``journal.remote.push``). What it confirmed, what it could not, and the last error are kept
  in the workspace's ``JournalReplica`` row, so an unconfirmed transition is visible (``ledger
  status``, the workspace page) and a push that keeps failing is counted, logged at ERROR each
  time and retried with a growing pause (at most ``MAX_PAUSE`` seconds).
- ``take_over`` runs when a worker takes a lease, before it repairs or applies anything: it
  makes the mirror if this host has none, fetches the remote's journals, moves every local
  journal ref forward to them (fast-forward only), and checks that each projection's journal
  head is in the local journal. A projection whose head the journal lacks, or a journal that
  diverged from the remote's, raises ``JournalBehind``: the worker refuses the workspace and
  says why. Nothing is ever rewritten to make them agree.
"""

from __future__ import annotations

import logging
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ephyra.landing.remote import credential_options
from ephyra.redaction.redact import redact
from journal.errors import JournalError
from journal.remote import JOURNAL_REFS, TRACKING_PREFIX, PushRejected, fetch, push
from journal.store import Journal
from ledger.lease import Fence, fence_check
from ledger.models import JournalReplica
from missions.models import Mission
from quests.models import Quest, Workspace
from quests.workspaces import workspace_journal

log = logging.getLogger(__name__)
REMOTE_NAME = "replica"  # the fetched journals are kept under refs/ephyra-remote/replica/
CHECK_SECONDS = 10.0  # how often refs moved by someone else (a command) are looked for
MAX_PAUSE = 60.0  # the longest pause between two attempts of a failing push
RECORD_SECONDS = 5.0  # while pushes work, the replica row is written at most this often


class JournalBehind(Exception):
    """The journal this host has, after fetching the remote's, lacks what the database shows."""


def git_options() -> list[str]:
    """Credentials as for landing: the file of ``EPHYRA_GIT_CREDENTIALS_FILE``, or git's own."""
    return credential_options(settings.EPHYRA_GIT_CREDENTIALS_FILE)


def journal_refs(repo: pygit2.Repository) -> dict[str, str]:
    """Every journal ref of the mirror and its head."""
    return {
        name: str(repo.references[name].target)
        for name in repo.references
        if name.startswith(JOURNAL_REFS)
    }


def _count(repo: pygit2.Repository, head: str, known: str | None) -> int:
    """Commits reachable from ``head`` and not from ``known``: the transitions not confirmed."""
    walker = repo.walk(pygit2.Oid(hex=head), pygit2.enums.SortMode.NONE)
    if known is not None and pygit2.Oid(hex=known) in repo:
        walker.hide(pygit2.Oid(hex=known))
    return sum(1 for _ in walker)


def _record(fence: Fence, workspace: Workspace, **values) -> None:
    with transaction.atomic():
        fence_check(fence)
        JournalReplica.objects.update_or_create(
            workspace=workspace, defaults={"remote": workspace.journal_remote, **values}
        )


@dataclass
class Replicator:
    """What this worker knows the remote holds, by workspace id: ref -> head confirmed."""

    confirmed: dict[int, dict[str, str]] = field(default_factory=dict)
    pause_until: dict[int, float] = field(default_factory=dict)
    checked: dict[int, float] = field(default_factory=dict)
    failures: dict[int, int] = field(default_factory=dict)
    errors: dict[int, tuple[str, object]] = field(default_factory=dict)  # not yet recorded
    last_ok: dict[int, object] = field(default_factory=dict)  # when a push last worked
    recorded: dict[int, tuple[int, object]] = field(default_factory=dict)  # (left, when)
    remotes: dict[int, str] = field(default_factory=dict)  # the remote ``confirmed`` is about

    def due(self, workspace_id: int, moved: bool) -> bool:
        """Whether to look for refs to push now: after a group, or every ``CHECK_SECONDS``."""
        now = time.monotonic()
        if workspace_id in self.errors:
            return True  # a failure the replica row does not show yet
        if now < self.pause_until.get(workspace_id, 0.0):
            return False
        return moved or now - self.checked.get(workspace_id, float("-inf")) >= CHECK_SECONDS

    def hook(self, workspace: Workspace, quest_ids: list[str]) -> None:
        """The engine's replication hook (``quests.engine.replicating``): push the refs a
        group just moved, before its database transaction commits. Never raises; while a
        failing remote is paused the push is left to ``push_moved``."""
        if not workspace.journal_remote or time.monotonic() < self.pause_until.get(
            workspace.pk, 0.0
        ):
            return
        journal = workspace_journal(workspace)
        heads = {
            f"{JOURNAL_REFS}quests/{quest}": str(head)
            for quest in quest_ids
            if (head := journal.head(quest)) is not None
        }
        try:
            self._push(workspace, journal, heads)
        except (JournalError, OSError, subprocess.TimeoutExpired) as exc:
            self._note_failure(workspace, exc)

    def _known(self, workspace: Workspace) -> dict[str, str]:
        """What the workspace's current remote confirmed; nothing after the remote changed."""
        if self.remotes.get(workspace.pk) != workspace.journal_remote:
            self.remotes[workspace.pk] = workspace.journal_remote
            self.confirmed[workspace.pk] = {}
        return self.confirmed.setdefault(workspace.pk, {})

    def _push(self, workspace: Workspace, journal: Journal, heads: dict[str, str]) -> None:
        known = self._known(workspace)
        # Nothing confirmed yet (a remote that could not be fetched): one glob for every ref,
        # not a command line with thousands of refspecs.
        everything = not known and len(heads) > 100
        try:
            push(
                journal,
                workspace.journal_remote,
                refs=None if everything else sorted(heads),
                options=git_options(),
                timeout=settings.EPHYRA_JOURNAL_PUSH_TIMEOUT,
            )
        except PushRejected as exc:
            known.update({ref: heads[ref] for ref in exc.accepted if ref in heads})
            raise
        known.update(heads)
        self.failures.pop(workspace.pk, None)
        self.pause_until.pop(workspace.pk, None)
        self.last_ok[workspace.pk] = timezone.now()

    def _note_failure(self, workspace: Workspace, exc: BaseException) -> None:
        failures = self.failures.get(workspace.pk, 0) + 1
        self.failures[workspace.pk] = failures
        self.pause_until[workspace.pk] = time.monotonic() + min(MAX_PAUSE, 0.5 * 2**failures)
        error = redact(str(exc) or type(exc).__name__)[:2000]
        self.errors[workspace.pk] = (error, timezone.now())
        log.error(
            "%s: journal push to %s failed (%d in a row): %s",
            workspace.slug,
            redact(workspace.journal_remote),
            failures,
            error,
        )

    def push_moved(self, fence: Fence, workspace: Workspace) -> int:
        """Push the refs that moved since the remote last confirmed them (what a failed push
        or a command left, missions, audit anchors) and record the state of the replica; the
        transitions still unconfirmed afterwards (0 when the remote has everything)."""
        if not workspace.journal_remote:
            return 0
        self.checked[workspace.pk] = time.monotonic()
        journal = workspace_journal(workspace)
        heads = journal_refs(journal.repo)
        known = self._known(workspace)
        moved = {ref: head for ref, head in heads.items() if known.get(ref) != head}
        if moved and time.monotonic() >= self.pause_until.get(workspace.pk, 0.0):
            try:
                self._push(workspace, journal, moved)
            except (JournalError, OSError, subprocess.TimeoutExpired) as exc:
                self._note_failure(workspace, exc)
        known = self.confirmed.get(workspace.pk, {})
        left = sum(
            _count(journal.repo, head, known.get(ref))
            for ref, head in heads.items()
            if known.get(ref) != head
        )
        self._record_state(fence, workspace, left)
        return left

    def _record_state(self, fence: Fence, workspace: Workspace, left: int) -> None:
        """Write the replica row when something changed: a failure, a recovery, or a push
        confirmed (at most every ``RECORD_SECONDS`` while all is well)."""
        now = timezone.now()
        error = self.errors.pop(workspace.pk, None)
        last_ok = self.last_ok.get(workspace.pk)
        if error is None and left == 0:
            recorded = self.recorded.get(workspace.pk)
            if last_ok is None or (
                recorded is not None
                and recorded[0] == 0
                and (last_ok - recorded[1]).total_seconds() < RECORD_SECONDS
            ):
                return
            _record(
                fence, workspace, unconfirmed=0, unconfirmed_since=None, last_ok_at=last_ok,
                last_attempt_at=last_ok, failures=0,
            )  # fmt: skip
            self.recorded[workspace.pk] = (0, last_ok)
            return
        row = JournalReplica.objects.filter(workspace=workspace).first()
        since = row.unconfirmed_since if row is not None and row.unconfirmed_since else now
        values = {
            "unconfirmed": left,
            "unconfirmed_since": since if left else None,
            "failures": self.failures.get(workspace.pk, 0),
            "last_attempt_at": now,
        }
        if last_ok is not None:
            values["last_ok_at"] = last_ok
        if error is not None:
            values.update(last_error=error[0], last_error_at=error[1])
        _record(fence, workspace, **values)
        self.recorded[workspace.pk] = (left, now)

    def take_over(self, fence: Fence, workspace: Workspace) -> None:
        """Before serving the workspace: fetch, fast-forward, check; ``JournalBehind`` when
        the journal lacks what the database shows. Nothing to do without a journal remote."""
        if not workspace.journal_remote:
            return
        mirror = Path(workspace.repository)
        if not mirror.exists():
            _make_mirror(workspace, mirror)
        journal = workspace_journal(workspace)
        problems: list[str] = []
        try:
            got = fetch(
                journal,
                workspace.journal_remote,
                name=REMOTE_NAME,
                options=git_options(),
                timeout=settings.EPHYRA_JOURNAL_PUSH_TIMEOUT,
            )
        except (JournalError, OSError, subprocess.TimeoutExpired) as exc:
            # The remote cannot be read: serve only if this disk already has all the database
            # shows (a restart on the same host); the check below decides.
            log.error(
                "%s: cannot fetch the journals from %s: %s",
                workspace.slug,
                redact(workspace.journal_remote),
                redact(str(exc)),
            )
            tracking: dict[str, str] = {}
        else:
            problems += [f"quest {q} diverged from the remote's journal" for q in got.diverged]
            tracking = _forward_others(journal)
            if got.created or got.fast_forwarded:
                log.info(
                    "%s: fetched %d new and %d moved-forward journals from the remote",
                    workspace.slug,
                    len(got.created),
                    len(got.fast_forwarded),
                )
        problems += behind_database(journal, workspace)
        if problems:
            more = f"; and {len(problems) - 10} more" if problems[10:] else ""
            shown = "; ".join(problems[:10]) + more
            message = (
                f"workspace {workspace.slug}: the journal is behind the database after fetching "
                f"from the journal remote ({shown}). The worker does not serve it: nothing is "
                "rewritten. Push the missing journals to the remote from the host that has "
                "them, then restart the worker."
            )
            log.error(message)
            _record(fence, workspace, blocked=message, blocked_at=timezone.now())
            raise JournalBehind(message)
        # What the remote holds is confirmed; anything this host has beyond it is pushed next.
        self.confirmed[workspace.pk] = tracking
        self.remotes[workspace.pk] = workspace.journal_remote
        self.checked.pop(workspace.pk, None)
        _record(fence, workspace, blocked="", blocked_at=None)


def _make_mirror(workspace: Workspace, mirror: Path) -> None:
    """A host that never served the workspace: an empty bare repository for the journals, with
    the source's branches when the workspace has a source remote (landing needs them)."""
    Journal.init(mirror, bare=True)
    log.info("%s: made a new mirror at %s", workspace.slug, mirror)
    if workspace.remote:
        done = subprocess.run(
            [
                "git", *git_options(), "--git-dir", str(mirror), "fetch", "--no-tags",
                workspace.remote, "+refs/heads/*:refs/heads/*",
            ],
            capture_output=True, text=True, check=False,
            timeout=settings.EPHYRA_JOURNAL_PUSH_TIMEOUT,
        )  # fmt: skip
        if done.returncode != 0:
            log.warning(
                "%s: could not fetch the branches of %s: %s",
                workspace.slug,
                redact(workspace.remote),
                redact(done.stderr.strip()),
            )


def _forward_others(journal: Journal) -> dict[str, str]:
    """``fetch`` moves the quests' refs; move the other journal refs (missions, audit
    anchors) the same way: create a missing one, fast-forward one behind (compare-and-swap),
    leave one ahead or diverged. Returns the remote's heads by local ref name."""
    repo = journal.repo
    prefix = f"{TRACKING_PREFIX}{REMOTE_NAME}/"
    theirs = {
        JOURNAL_REFS + name[len(prefix) :]: str(repo.references[name].target)
        for name in repo.references
        if name.startswith(prefix)
    }
    for ref, head in theirs.items():
        if ref.startswith(f"{JOURNAL_REFS}quests/"):
            continue
        ours = repo.references.get(ref)
        if ours is not None:
            mine = ours.target
            if str(mine) == head or not repo.descendant_of(pygit2.Oid(hex=head), mine):
                continue
        old = str(ours.target) if ours is not None else "0" * 40
        subprocess.run(
            ["git", "--git-dir", journal.path, "update-ref", ref, head, old],
            capture_output=True, check=False,
        )  # fmt: skip
    return theirs


def behind_database(journal: Journal, workspace: Workspace) -> list[str]:
    """The quest projections whose journal head the local journal does not contain. Missions
    behind are logged, not refused: people write them on the web host (no lease), the worker
    never repairs them, and they hold no effects this worker would deliver again."""
    quests = Quest.objects.filter(workspace=workspace).values_list("quest_id", "journal_head")
    missions = Mission.objects.filter(workspace=workspace).values_list("mission_id", "journal_head")
    found = _missing(journal, "quest", f"{JOURNAL_REFS}quests/", quests)
    lagging = _missing(journal, "mission", f"{JOURNAL_REFS}missions/", missions)
    if lagging:
        log.warning(
            "%s: mission journals behind the database on this host: %s",
            workspace.slug,
            "; ".join(lagging[:10]),
        )
    return found


def _missing(journal: Journal, kind: str, prefix: str, rows) -> list[str]:
    repo = journal.repo
    found: list[str] = []
    for name, head in rows:
        ours = repo.references.get(prefix + name)
        if ours is None:
            found.append(f"{kind} {name} has no journal here")
            continue
        if str(ours.target) == head:
            continue
        try:
            wanted = pygit2.Oid(hex=head)
        except ValueError:
            found.append(f"{kind} {name}: the database's head {head!r} is not a commit id")
            continue
        if wanted not in repo or not repo.descendant_of(ours.target, wanted):
            found.append(f"{kind} {name}: the journal lacks {head[:12]}, the database's head")
    return found
