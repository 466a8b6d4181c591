"""What the quest page shows, gathered in one place: the evidence, the patch as a diff read from
the workspace's mirror, the proof bundle with its digest recomputed, and the actions the person
may take now (asked of the machine, not guessed by the template)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

import pygit2
from django.utils.safestring import SafeString, mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from ephyra.core import events as ev
from ephyra.core.canonical import canonical_digest
from ephyra.core.machine import decide
from ephyra.core.quest import Quest as QuestValue
from intake.otlp.models import IngestedSignal
from journal.format import PROOF_DIR, PROOF_FILE
from quests.models import Quest
from quests.roles import allows
from quests.selectors import CHECKPOINT_OF, checkpoint_of
from quests.workspaces import workspace_journal, workspace_policy

SIGNALS_SHOWN = 20
DIFF_COLLAPSE_LINES = 400  # a file's diff longer than this starts collapsed
DIFF_MAX_FILES = 200


@dataclass
class FileDiff:
    path: str
    added: int
    removed: int
    html: SafeString
    collapsed: bool


@dataclass
class Patch:
    base: str
    head: str
    files: list[FileDiff] = field(default_factory=list)
    problem: str = ""  # why no diff can be shown


@dataclass
class Proof:
    bundle: dict
    digest: str  # as recorded
    recomputed: str
    matches: bool


def signals(quest: Quest) -> list[IngestedSignal]:
    """The latest signals the quest took from OTLP exports, newest first (one query)."""
    return list(
        IngestedSignal.objects.filter(workspace_id=quest.workspace_id, quest_id=quest.quest_id)
        .order_by("-received_at", "-pk")[:SIGNALS_SHOWN]
    )


def patch(quest: Quest) -> Patch | None:
    """The diff base..head of the quest's patch, from the workspace's mirror, per file,
    highlighted; None when no patch is recorded yet."""
    data = quest.data
    base, head = data.get("base"), data.get("patch_head")
    if not base or not head:
        return None
    result = Patch(base, head)
    try:
        repo = pygit2.Repository(quest.workspace.repository)
        old, new = repo.revparse_single(base), repo.revparse_single(head)
    except (KeyError, ValueError, pygit2.GitError):
        result.problem = (
            f"the commits {base[:12]}..{head[:12]} are not in the workspace's mirror yet"
        )
        return result
    diff = repo.diff(old, new, context_lines=3)
    formatter = HtmlFormatter(nowrap=True)
    for patch_ in list(diff)[:DIFF_MAX_FILES]:
        text = patch_.text or ""
        lines = text.count("\n")
        result.files.append(
            FileDiff(
                path=patch_.delta.new_file.path,
                added=patch_.line_stats[1],
                removed=patch_.line_stats[2],
                # Pygments escapes the text it wraps in its markup.
                html=mark_safe(highlight(text, DiffLexer(), formatter)),
                collapsed=lines > DIFF_COLLAPSE_LINES,
            )
        )
    if len(diff) > DIFF_MAX_FILES:
        result.problem = f"{len(diff) - DIFF_MAX_FILES} more files are not shown"
    return result


def proof(quest: Quest) -> Proof | None:
    """The proof bundle journaled for the quest, with its canonical SHA-256 digest recomputed
    here and compared with the one recorded."""
    raw = workspace_journal(quest.workspace).read(quest.quest_id, f"{PROOF_DIR}/{PROOF_FILE}")
    if raw is None:
        return None
    stored = json.loads(raw)
    bundle = stored.get("bundle", {})
    recomputed = canonical_digest(bundle)
    digest = stored.get("digest", "")
    return Proof(bundle, digest, recomputed, recomputed == digest)


@dataclass(frozen=True)
class Offer:
    """An action the person may take now: the machine accepts it and their role allows it."""

    action: str  # claim, release, decide, pause, resume, kill
    label: str
    checkpoint: str = ""
    verdict: str = ""


def offers(user, roles: frozenset, quest: Quest) -> list[Offer]:
    """What to show as buttons. Each candidate event is put to the machine against the quest
    as it is; only what it would accept, and the person's ``roles`` allow, is offered."""
    workspace = quest.workspace
    value = QuestValue.from_dict(quest.data)
    policy = workspace_policy(workspace)
    actor = user.get_username()
    base = {"id": "offer", "quest": quest.quest_id, "at": value.updated_at, "actor": actor}
    checkpoint = checkpoint_of(quest)
    candidates: list[tuple[Offer, ev.BaseEvent]] = [
        (Offer("claim", "Claim the review"), ev.Claimed(**base)),
        (Offer("release", "Release"), ev.Released(**base)),
        (Offer("pause", "Pause"), ev.Paused(**base, reason="paused")),
        (Offer("resume", "Resume"), ev.Resumed(**base)),
        (Offer("kill", "Kill"), ev.Killed(**base, reason="killed")),
    ]
    if checkpoint:
        for verdict, label in (("approve", "Approve"), ("revise", "Revise"), ("reject", "Reject")):
            event = ev.CheckpointDecided(
                **base, checkpoint=checkpoint, verdict=verdict, comment="offered"
            )
            offer = Offer("decide", f"{label} {checkpoint}", checkpoint, verdict)
            candidates.append((offer, event))
    shown = []
    for offer, event in candidates:
        if allows(roles, offer.action) and decide(value, event, policy).accepted:
            shown.append(offer)
    return shown


def visited_states(timeline) -> list:
    """The accepted transitions of a timeline (newest first), oldest first, for the path."""
    from inbox.statepath import Step

    return [
        Step(entry.state_before, entry.state)
        for entry in reversed(timeline)
        if entry.outcome == "accepted" and entry.state
    ]


@functools.lru_cache(maxsize=16)
def _paths_at(repository: str, commit: str) -> tuple[str, ...]:
    """Every file path of the tree at ``commit`` (a commit id: the tree never changes)."""
    repo = pygit2.Repository(repository)
    paths: list[str] = []

    def walk(tree, prefix: str) -> None:
        for entry in tree:
            name = f"{prefix}{entry.name}"
            if entry.type_str == "tree":
                walk(repo[entry.id], f"{name}/")
            elif entry.type_str == "blob":
                paths.append(name)

    walk(repo[commit].peel(pygit2.Tree), "")
    return tuple(paths)


def repository_path(quest: Quest, frame_file: str, commit: str) -> str:
    """The file of the repository at ``commit`` that a stack frame's path names: production
    paths differ from the repository's (``/srv/app/shop/cart.py`` is ``shop/cart.py``), so
    the longest matching suffix of path components wins; "" when nothing matches."""
    wanted = [part for part in frame_file.replace("\\", "/").split("/") if part]
    if not wanted:
        return ""
    try:
        paths = _paths_at(quest.workspace.repository, commit)
    except (KeyError, ValueError, pygit2.GitError):
        return ""
    best, best_len = "", 0
    for path in paths:
        parts = path.split("/")
        n = 0
        while n < len(parts) and n < len(wanted) and parts[-1 - n] == wanted[-1 - n]:
            n += 1
        if n > best_len:
            best, best_len = path, n
    return best


def browse_commit(quest: Quest) -> str:
    """The commit to link frames to: the deployed one when known, else the patch base, else
    the tip of the workspace's base branch in the mirror; "" when none can be read."""
    data = quest.data
    for name in ("deployed_commit", "base"):
        if data.get(name):
            return data[name]
    try:
        repo = pygit2.Repository(quest.workspace.repository)
        return str(repo.revparse_single(quest.workspace.base_branch).peel(pygit2.Commit).id)
    except (KeyError, ValueError, pygit2.GitError):
        return ""


__all__ = ["CHECKPOINT_OF", "Offer", "offers", "patch", "proof", "signals", "visited_states"]
