"""Research: what the repository says about the signal before anything runs.

``research`` maps the signal's frames to the repository's files at ``head``, blames the lines
of the application's frames, and ranks the commits since the last known-good commit that
touched those files: first those that changed a frame's function (innermost frame first),
then those that changed the innermost frame's file, then the other frames' files; newer before
older within each. Earlier quests of the same fingerprint say how they ended. It reads Git
only; nothing runs. ``Research.summary()`` is the hypothesis the quest shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ephyra.agent.frames import (
    FrameMatch,
    file_lines,
    frame_lines,
    map_frames,
    repository_files,
)
from ephyra.agent.gitcli import (
    FIELD,
    Commit,
    GitError,
    commits,
    first_parents,
    git,
    is_ancestor,
    is_shallow,
    resolve,
    run_git,
)
from ephyra.agent.inputs import EarlierQuest, SignalFacts, Workdir, stop_if_asked
from ephyra.policy.work import WorkPolicy
from ephyra.redaction.redact import redact

SUSPECTS_KEPT = 20  # in the evidence; the summary names the first five
MAX_BLAMED = 20  # frames of the application blamed, innermost first
MAX_TRACED = 5  # frames whose function's history is followed (git log -L)
MAX_CONSIDERED = 2000  # commits of the window read for the files they touched


@dataclass(frozen=True)
class Blame:
    """Who last changed a frame's line at ``head``."""

    frame: int
    path: str
    line: int
    commit: Commit | None
    note: str = ""  # why there is no commit, or that its history goes past a shallow mirror

    def to_evidence(self) -> dict[str, Any]:
        return {
            "frame": self.frame,
            "path": self.path,
            "line": self.line,
            "commit": self.commit.to_evidence() if self.commit else None,
            "note": self.note,
        }


@dataclass(frozen=True)
class Suspect:
    """A commit of the window that touched a frame's file, and how."""

    commit: Commit
    rank: int  # 1 is the most suspect
    reasons: tuple[str, ...]

    def to_evidence(self) -> dict[str, Any]:
        return {"rank": self.rank, **self.commit.to_evidence(), "reasons": list(self.reasons)}


@dataclass(frozen=True)
class Research:
    head: str
    signal: SignalFacts
    frames: tuple[FrameMatch, ...]
    blames: tuple[Blame, ...]
    suspects: tuple[Suspect, ...]
    window: str  # which commits were searched, in words
    considered: int  # commits of the window that touched a matched file
    earlier: tuple[EarlierQuest, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def matched(self) -> tuple[FrameMatch, ...]:
        return tuple(m for m in self.frames if m.path is not None)

    @property
    def unmatched(self) -> tuple[FrameMatch, ...]:
        return tuple(m for m in self.frames if m.path is None)

    def summary(self) -> str:
        """The hypothesis, in words: where the error is raised, who last changed it, the
        commits most likely to blame, and what earlier quests of the error did."""
        s = self.signal
        lines = [f"{s.exception_type}: {redact(s.message)[:300]}".rstrip(": ")]
        app = [m for m in self.matched if m.frame.in_app]
        if app:
            first = app[0]
            lines.append(
                f"Raised in {first.path}:{first.frame.line or '?'} in {first.frame.function} "
                f"(frame {first.index + 1} of {len(self.frames)}), at {self.head[:12]}."
            )
        lines.append(
            f"{len(self.matched)} of {len(self.frames)} frames map to files of the repository."
        )
        for m in self.unmatched[:5]:
            lines.append(f"  Frame {m.index + 1} ({m.frame.describe()[:200]}): {m.why}.")
        if len(self.unmatched) > 5:
            lines.append(f"  … and {len(self.unmatched) - 5} more frames matched nothing.")
        for b in self.blames[:3]:
            if b.commit is not None:
                lines.append(
                    f"Line {b.line} of {b.path} was last changed by {b.commit.describe()}."
                )
            else:
                lines.append(f"Line {b.line} of {b.path}: {b.note}.")
        if self.suspects:
            lines.append(f"Suspect commits {self.window} ({self.considered} touched these files):")
            for suspect in self.suspects[:5]:
                lines.append(
                    f"  {suspect.rank}. {suspect.commit.describe()}: {'; '.join(suspect.reasons)}"
                )
        elif app:
            lines.append(f"No commit {self.window} touched these files.")
        if self.earlier:
            lines.append(
                "Earlier quests of this error: "
                + "; ".join(_ended(q) for q in self.earlier[:10])
                + "."
            )
        lines.extend(self.notes)
        return "\n".join(lines)[:4000]

    def to_evidence(self) -> dict[str, Any]:
        return {
            "head": self.head,
            "window": self.window,
            "frames": [m.to_evidence() for m in self.frames[:50]],
            "blame": [b.to_evidence() for b in self.blames],
            "suspects": [s.to_evidence() for s in self.suspects[:SUSPECTS_KEPT]],
            "considered": self.considered,
            "earlier": [
                {
                    "quest": q.quest_id,
                    "state": q.state,
                    "revision": q.revision,
                    "landed_commit": q.landed_commit,
                    "park_reason": q.park_reason,
                }
                for q in self.earlier[:20]
            ],
            "notes": list(self.notes),
        }


def _ended(quest: EarlierQuest) -> str:
    if quest.landed_commit:
        return f"{quest.quest_id} landed {quest.landed_commit[:12]}"
    if quest.park_reason:
        return f"{quest.quest_id} {quest.state} ({quest.park_reason})"
    return f"{quest.quest_id} {quest.state}"


def research(
    workdir: Workdir,
    signal: SignalFacts,
    *,
    head: str,
    known_good: str | None,
    earlier: list[EarlierQuest],
    work: WorkPolicy | None = None,
) -> Research:
    """Research the signal in the repository at ``head`` (see the module's docstring).

    The window is ``known_good..head`` when ``known_good`` is an ancestor of ``head``, else the
    last ``work.walk_back`` first-parent commits (the policy's default when ``work`` is not
    given) and what they merged."""
    stop_if_asked(workdir)
    tree = workdir.worktree
    head_sha = resolve(tree, head)
    if head_sha is None:
        raise GitError(f"the repository has no commit {head!r}")
    notes = []
    shallow = is_shallow(tree)
    if shallow:
        notes.append(
            "The mirror is shallow: history before its boundary is not searched "
            "(deepen it with git fetch --unshallow to search all of it)."
        )
    matches = map_frames(repository_files(tree, head_sha), signal.frames)
    app = [m for m in matches if m.path is not None and m.frame.in_app]
    if not signal.frames:
        notes.append("The signal has no stack frames: there is nothing to map.")
    elif not app:
        notes.append("No frame of the application maps to a file: the suspects cannot be ranked.")
    stop_if_asked(workdir)
    blames = tuple(_blame(tree, head_sha, m, shallow) for m in app[:MAX_BLAMED] if m.frame.line)
    window, since = _window(tree, head_sha, known_good, work or WorkPolicy(), notes)
    stop_if_asked(workdir)
    suspects, considered = _suspects(tree, head_sha, since, app)
    return Research(
        head=head_sha,
        signal=signal,
        frames=matches,
        blames=blames,
        suspects=suspects,
        window=window,
        considered=considered,
        earlier=tuple(earlier),
        notes=tuple(notes),
    )


def _window(
    tree: Path, head: str, known_good: str | None, work: WorkPolicy, notes: list[str]
) -> tuple[str, str | None]:
    """Which commits are searched: (in words, the commit the range starts after)."""
    if known_good is not None:
        good = resolve(tree, known_good)
        if good is not None and is_ancestor(tree, good, head):
            return f"since {good[:12]}", good
        notes.append(
            f"The known-good commit {known_good[:40]!r} is not in the repository's history of the "
            f"head; searched the last {work.walk_back} first-parent commits instead."
        )
    chain = first_parents(tree, head, limit=work.walk_back + 1)
    if len(chain) > work.walk_back:
        return f"in the last {work.walk_back} first-parent commits", chain[-1]
    return f"in the whole history ({len(chain)} first-parent commits)", None


def _blame(tree: Path, head: str, match: FrameMatch, shallow: bool) -> Blame:
    assert match.path is not None and match.frame.line is not None
    line = match.frame.line
    done = run_git(tree, "blame", "--porcelain", "-L", f"{line},{line}", head, "--", match.path)
    if done.returncode != 0:
        lines = file_lines(tree, head, match.path) or []
        note = (
            f"the line is past the end of the file at {head[:12]} ({len(lines)} lines): "
            "production runs other code than the head"
            if line > len(lines)
            else f"git blame failed: {done.stderr.strip()[:200]}"
        )
        return Blame(match.index, match.path, line, None, note)
    sha = done.stdout.split(maxsplit=1)[0]
    found = commits(tree, [sha]).get(sha)
    note = ""
    if shallow and sha in _shallow_boundary(tree):
        note = "the line is older than the shallow mirror's history: this is its boundary commit"
    return Blame(match.index, match.path, line, found, note)


def _shallow_boundary(tree: Path) -> set[str]:
    path = Path(git(tree, "rev-parse", "--path-format=absolute", "--git-path", "shallow"))
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def _suspects(
    tree: Path, head: str, since: str | None, app: list[FrameMatch]
) -> tuple[tuple[Suspect, ...], int]:
    """The commits of the window that touched the frames' files, ranked."""
    if not app:
        return (), 0
    revs = [head] if since is None else [f"{since}..{head}"]
    paths = sorted({m.path for m in app if m.path})
    out = git(
        tree,
        "log",
        f"--max-count={MAX_CONSIDERED}",
        "--format=\x1e%H",
        "--name-only",
        *revs,
        "--",
        *paths,
    )
    touched: dict[str, set[str]] = {}
    order: list[str] = []
    for chunk in out.split("\x1e"):
        words = chunk.split("\n")
        if words[0].strip():
            order.append(words[0].strip())
            touched[words[0].strip()] = {w for w in words[1:] if w}
    traced = _function_touches(tree, head, since, app[:MAX_TRACED])
    innermost = app[0].path
    keyed = []
    for position, sha in enumerate(order):
        reasons = []
        key = None
        for match in app:
            if sha in traced.get(match.index, set()):
                reasons.append(f"changed {match.frame.function}() (frame {match.index + 1})")
                key = key or (0, match.index, position)
        if innermost in touched[sha]:
            reasons.append(f"changed {innermost}, the innermost frame's file")
            key = key or (1, 0, position)
        others = [m for m in app if m.path in touched[sha] and m.path != innermost]
        if others:
            reasons.append(f"changed {others[0].path} (frame {others[0].index + 1})")
            key = key or (2, others[0].index, position)
        if key is not None:
            keyed.append((key, sha, tuple(dict.fromkeys(reasons))))
    keyed.sort()
    details = commits(tree, [sha for _, sha, _ in keyed[:SUSPECTS_KEPT]])
    suspects = tuple(
        Suspect(details[sha], rank, reasons)
        for rank, (_, sha, reasons) in enumerate(keyed[:SUSPECTS_KEPT], 1)
        if sha in details
    )
    return suspects, len(order)


def _function_touches(
    tree: Path, head: str, since: str | None, app: list[FrameMatch]
) -> dict[int, set[str]]:
    """For each frame, the commits of the window that changed its function's lines (or its
    own line, when no function is found): ``git log -L``, which follows the lines back
    through the changes that moved them."""
    found: dict[int, set[str]] = {}
    revs = [head] if since is None else [f"{since}..{head}"]
    for match in app:
        assert match.path is not None
        span = frame_lines(file_lines(tree, head, match.path), match.frame)
        if span is None:
            continue
        done = run_git(
            tree, "log", f"--format={FIELD}%H", "-L", f"{span[0]},{span[1]}:{match.path}", *revs
        )
        if done.returncode == 0:
            found[match.index] = {
                line[1:].strip() for line in done.stdout.splitlines() if line.startswith(FIELD)
            }
    return found
