"""The git command line, as the steps use it on a worktree: read history, move the checkout,
revert. These are Git's own operations on the mirror, not the project's code, so they run here
directly (``git -C <worktree>``, never through a shell) instead of through the runner.

Every call runs with Git's hooks off (a mirror's hooks are not ours to run), no filesystem
monitor, no signing, no prompt, in the C locale, and without the worker's ``GIT_*`` variables
(a ``GIT_DIR`` set by a hook would point every command elsewhere).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ephyra.redaction.redact import redact

# Options before the subcommand: the worktree's own configuration cannot make git run a
# program of the repository's choosing.
_SAFE = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "advice.detachedHead=false",
)
FIELD = "\x1f"  # between the fields of one --format line
IDENTITY = ("Ephyra", "ephyra@localhost")


class GitError(Exception):
    """A git command failed; the message holds the command and what git said."""


def run_git(
    worktree: Path, *args: str, identity: tuple[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(LC_ALL="C", GIT_TERMINAL_PROMPT="0", GIT_EDITOR="true")
    if identity is not None:
        name, email = identity
        env.update(
            GIT_AUTHOR_NAME=name,
            GIT_AUTHOR_EMAIL=email,
            GIT_COMMITTER_NAME=name,
            GIT_COMMITTER_EMAIL=email,
        )
    return subprocess.run(
        ["git", "-C", str(worktree), *_SAFE, *args],
        capture_output=True,
        text=True,
        errors="replace",
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def git(worktree: Path, *args: str, identity: tuple[str, str] | None = None) -> str:
    """Run git; its output without the trailing newline. ``GitError`` when it fails."""
    done = run_git(worktree, *args, identity=identity)
    if done.returncode != 0:
        said = done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}"
        raise GitError(f"git {' '.join(args)} failed in {worktree}: {said}")
    return done.stdout.rstrip("\n")


def resolve(worktree: Path, revision: str) -> str | None:
    """The commit ``revision`` names (a sha, a branch, a tag, ``HEAD~3``), or ``None`` when the
    repository has no such commit. Never read as an option."""
    if not revision or revision.startswith("-"):
        return None
    done = run_git(
        worktree, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision}^{{commit}}"
    )
    return done.stdout.strip() if done.returncode == 0 else None


def is_ancestor(worktree: Path, older: str, newer: str) -> bool:
    return run_git(worktree, "merge-base", "--is-ancestor", older, newer).returncode == 0


def is_shallow(worktree: Path) -> bool:
    return git(worktree, "rev-parse", "--is-shallow-repository") == "true"


def first_parents(
    worktree: Path, head: str, *, limit: int | None = None, since: str | None = None
) -> list[str]:
    """``head`` and its first-parent ancestors, newest first: at most ``limit`` of them, and
    none that ``since`` reaches (``since`` itself excluded)."""
    args = ["rev-list", "--first-parent"]
    if limit is not None:
        args.append(f"--max-count={limit}")
    args.append(head)
    if since is not None:
        args.append(f"^{since}")
    out = git(worktree, *args)
    return out.split() if out else []


@dataclass(frozen=True)
class Commit:
    """A commit as people name it. The subject is redacted (a commit message may hold what
    should never be stored); the author's address is left out."""

    sha: str
    author: str
    date: str  # the author date, ISO 8601
    subject: str
    parents: tuple[str, ...]

    @property
    def is_merge(self) -> bool:
        return len(self.parents) > 1

    @property
    def short(self) -> str:
        return self.sha[:12]

    def describe(self) -> str:
        """``1a2b3c4d5e6f "Count quantities" (Ada Lovelace, 2024-03-02)``"""
        return f'{self.short} "{self.subject}" ({self.author}, {self.date[:10]})'

    def to_evidence(self) -> dict[str, object]:
        return {
            "sha": self.sha,
            "author": self.author,
            "date": self.date,
            "subject": self.subject,
            "merge": self.is_merge,
        }


_COMMIT_FORMAT = FIELD.join(("%H", "%an", "%aI", "%P", "%s"))


def commits(worktree: Path, shas: list[str]) -> dict[str, Commit]:
    """The commits named, read in one call."""
    if not shas:
        return {}
    out = git(worktree, "show", "-s", "--no-walk=unsorted", f"--format={_COMMIT_FORMAT}", *shas)
    found = {}
    for line in out.splitlines():
        commit = _parse_commit(line)
        if commit is not None:
            found[commit.sha] = commit
    return found


def commit(worktree: Path, sha: str) -> Commit:
    found = commits(worktree, [sha])
    if sha not in found:
        raise GitError(f"no commit {sha} in {worktree}")
    return found[sha]


def _parse_commit(line: str) -> Commit | None:
    parts = line.split(FIELD)
    if len(parts) != 5:
        return None
    sha, author, date, parents, subject = parts
    return Commit(
        sha=sha,
        author=redact(author)[:200],
        date=date,
        subject=redact(subject)[:300],
        parents=tuple(parents.split()),
    )


def log_commits(worktree: Path, *args: str) -> list[Commit]:
    """``git log`` with ``args`` (a range, options, ``--`` and paths), newest first."""
    out = git(worktree, "log", f"--format={_COMMIT_FORMAT}", *args)
    return [c for c in (_parse_commit(line) for line in out.splitlines()) if c is not None]


def head_ref(worktree: Path) -> str:
    """Where the worktree is: ``refs/heads/<branch>``, or the commit when it is detached."""
    done = run_git(worktree, "symbolic-ref", "--quiet", "HEAD")
    if done.returncode == 0:
        return done.stdout.strip()
    return git(worktree, "rev-parse", "HEAD")


def git_dir(worktree: Path) -> Path:
    """The worktree's own git directory (``<mirror>/worktrees/<name>`` for a linked one)."""
    return Path(git(worktree, "rev-parse", "--path-format=absolute", "--git-dir"))
