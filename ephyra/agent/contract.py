"""The coding agent's contract: prompt in, a diff out, judged by what it changed.

``run_agent(workdir, agent, prompt, base=…, protected=…)``:

1. writes the prompt to the artifacts (``<name>-prompt.md``, the copy people read) and to
   ``.ephyra-prompt.md`` in the worktree (the copy the agent reads: a sandboxed agent sees
   nothing but the worktree); ``{prompt_file}`` in the policy's command becomes its path;
2. runs the command through the workdir's runner, in the worktree, stdin closed, with the
   workdir's environment and the agent's one key (``agent.api_key_env``) and nothing else,
   under ``agent.timeout_seconds``;
3. reads the tool's structured output (``agent.output``; see ``agent_output``): whether it
   says it failed, its last message, and its usage. The exit status alone is never trusted:
   a tool can exit 0 after failing;
4. judges the worktree's diff against ``base`` (everything the agent left, committed by it or
   not) and refuses it, with a reason, when: the run failed or timed out; the agent changed
   the worktree's ``.git`` file or added a symbolic link that points outside the worktree, a
   path with ``..``, or a nested repository; it changed one of the ``protected`` files (the
   reproduction's tests); it changed nothing; the diff has more than ``agent.max_diff_lines``
   lines; an added line looks like a secret;
5. commits an accepted diff on the worktree's branch (one commit on top of where the branch
   was, whatever commits the agent made itself), with a message naming the quest. A refused
   one is undone: the branch and the files are put back as they were, and the diff is kept,
   redacted, in ``<name>.diff`` for a person to read.

Files the agent's own test runs leave (``__pycache__``, ``.pytest_cache``) and Ephyra's own
(``.ephyra-*``) are never part of the diff. What the local runner cannot stop (a write outside
the worktree by a path of its own: ``/home/…``) only the sandbox prevents; see
``docs/work.md``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ephyra.agent.gitcli import IDENTITY, GitError, git, head_ref
from ephyra.agent.inputs import Stopped, Workdir, run_evidence, stop_if_asked
from ephyra.agent.prompt import Prompt, secret_findings
from ephyra.agent.tool_output import MAX_MESSAGE, AgentOutput, Usage, agent_output
from ephyra.core.ports import RunLimits, RunRequest, RunResult
from ephyra.policy.work import AgentPolicy
from ephyra.redaction.redact import redact

PROMPT_FILE = ".ephyra-prompt.md"
# Never part of an agent's diff: what test runs leave behind, and Ephyra's own files.
NOT_THE_AGENTS = tuple(
    f":(exclude,glob)**/{pattern}"
    for pattern in (
        "__pycache__/**",
        "*.pyc",
        ".pytest_cache/**",
        ".ephyra-*",
        ".ephyra-*/**",
    )
)
MAX_OUTPUT_READ = 8 * 1024 * 1024
_BRANCH = re.compile(r"^refs/heads/ephyra/(?P<quest>[^/]+)/r\d+$")


@dataclass(frozen=True)
class Refusal:
    """Why there is no patch: ``reason`` is the word ``patch_failed`` carries."""

    reason: str
    detail: str
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentResult:
    """The agent's patch (``head``: the commit on the branch) or its ``refusal``; the files
    the diff changed, its size, the usage, the runs and the artifacts' names."""

    base: str
    head: str | None
    refusal: Refusal | None
    files: tuple[str, ...]
    diff_lines: int
    usage: Usage
    message: str
    runs: tuple[dict[str, Any], ...]
    artifacts: tuple[str, ...]
    prompt: dict[str, Any] = field(default_factory=dict)
    over_budget: bool = False

    @property
    def ok(self) -> bool:
        return self.refusal is None

    def summary(self) -> str:
        if self.refusal is not None:
            refusal = self.refusal
            text = f"The coding agent's work was refused ({refusal.reason}): {refusal.detail}"
        else:
            files = ", ".join(self.files[:5]) + (" …" if len(self.files) > 5 else "")
            text = (
                f"The coding agent's patch is {self.head[:12] if self.head else '?'} on top of "
                f"{self.base[:12]}: {self.diff_lines} changed lines in {files}."
            )
        if self.usage.reported:
            text += f"\nUsage: {self.usage.tokens:,} tokens, ${self.usage.cost_micros / 1e6:.4f}."
        if self.over_budget:
            text += "\nThe agent reported spending more than its budget."
        if self.message:
            text += f"\nThe agent said: {self.message}"
        return redact(text)[:4000]

    def to_evidence(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "head": self.head,
            "refusal": None
            if self.refusal is None
            else {
                "reason": self.refusal.reason,
                "detail": redact(self.refusal.detail)[:1000],
                "files": list(self.refusal.files[:50]),
            },
            "files": list(self.files[:200]),
            "diff_lines": self.diff_lines,
            "usage": self.usage.to_evidence(),
            "over_budget": self.over_budget,
            "message": self.message[:MAX_MESSAGE],
            "runs": list(self.runs),
            "artifacts": list(self.artifacts),
            "prompt": self.prompt,
        }


def run_agent(
    workdir: Workdir,
    agent: AgentPolicy,
    prompt: Prompt,
    *,
    base: str,
    protected: Sequence[str],
    name: str = "agent",
    environ: Mapping[str, str] | None = None,
) -> AgentResult:
    """Run the coding agent on the worktree and judge its diff; see the module's docstring.
    ``environ`` is where the agent's key is read (the worker's environment by default)."""
    stop_if_asked(workdir)
    tree = workdir.worktree
    branch = head_ref(tree)
    if not branch.startswith("refs/heads/"):
        raise GitError(f"the worktree {tree} is not on a branch ({branch[:12]} is checked out)")
    start = git(tree, "rev-parse", "HEAD")
    if git(tree, "status", "--porcelain", "--untracked-files=no"):
        raise GitError(f"the worktree {tree} has uncommitted changes before the agent runs")
    dot_git = (tree / ".git").read_bytes() if (tree / ".git").is_file() else None
    artifacts = [f"{name}-prompt.md"]
    (workdir.artifacts / f"{name}-prompt.md").write_text(prompt.text)
    common = {"base": base, "prompt": prompt.to_evidence()}

    env = dict(workdir.env)
    if agent.api_key_env:
        key = (os.environ if environ is None else environ).get(agent.api_key_env)
        if not key:
            refusal = Refusal(
                "agent_not_configured",
                f"{agent.api_key_env}, the agent's key, is not set in the worker's environment",
            )
            return AgentResult(
                head=None, refusal=refusal, files=(), diff_lines=0, usage=Usage(), message="",
                runs=(), artifacts=tuple(artifacts), **common,
            )  # fmt: skip
        env[agent.api_key_env] = key

    prompt_path = tree / PROMPT_FILE
    _remove(prompt_path)  # never write through a link an earlier run may have left there
    prompt_path.write_text(prompt.text)
    argv = tuple(word.replace("{prompt_file}", str(prompt_path)) for word in agent.command)
    try:
        result = workdir.runner.run(
            RunRequest(
                argv=argv,
                cwd=str(tree),
                artifacts_dir=str(workdir.artifacts),
                name=name,
                env=env,
                limits=RunLimits(
                    wall_seconds=float(agent.timeout_seconds),
                    cpu_seconds=agent.timeout_seconds,
                    # Agents are Node or Python programs that reserve more address space
                    # than they use: the wall clock bounds them, not RLIMIT_AS.
                    address_space_bytes=None,
                ),
            ),
            should_stop=workdir.should_stop,
        )
    finally:
        _remove(prompt_path)
    artifacts += [f"{name}.log", f"{name}.json"]
    output = agent_output(agent.output, _read_output(result))
    usage = Usage(
        tokens=output.usage.tokens,
        cost_micros=output.usage.cost_micros,
        seconds=result.duration_seconds,
        reported=output.usage.reported,
    )
    judged = _Judge(tree, branch, start, base, dot_git)
    if result.stopped:
        judged.undo()
        raise Stopped(f"asked to stop during {name}")
    refusal = _refusal(result, output) or judged.refusal(protected, agent.max_diff_lines)
    if judged.diff_text:
        (workdir.artifacts / f"{name}.diff").write_text(redact(judged.diff_text))
        artifacts.append(f"{name}.diff")
    head = None
    if refusal is None:
        head = judged.commit(_message(branch, agent, output))
    else:
        judged.undo()
    return AgentResult(
        head=head,
        refusal=refusal,
        files=judged.files,
        diff_lines=judged.lines,
        usage=usage,
        message=output.message,
        runs=(run_evidence(name, result),),
        artifacts=tuple(artifacts),
        over_budget=usage.cost_micros > agent.max_cost_micros,
        **common,
    )


def _refusal(result: RunResult, output: AgentOutput) -> Refusal | None:
    if result.timed_out:
        return Refusal(
            "agent_timed_out",
            f"the agent was killed at its limit of {result.limits.wall_seconds:g} s",
        )
    if result.exit_code != 0:
        how = (
            f"exited {result.exit_code}"
            if result.exit_code is not None
            else f"was killed by {result.signal}"
        )
        said = f"; it reported: {output.error}" if output.error else ""
        return Refusal("agent_failed", f"the agent {how}{said}{_last_lines(result)}")
    if output.failed:
        return Refusal("agent_failed", f"the agent exited 0 but reported a failure: {output.error}")
    return None


def _last_lines(result: RunResult) -> str:
    """The end of the run's output (redacted), where a tool says why it stopped."""
    lines = [line.strip() for line in result.output_excerpt.splitlines() if line.strip()]
    if not lines:
        return ""
    return "; its output ends: " + " / ".join(redact(line)[:200] for line in lines[-3:])


class _Judge:
    """The worktree's diff against the base, staged apart from the agent's own commits."""

    def __init__(self, tree: Path, branch: str, start: str, base: str, dot_git: bytes | None):
        self.tree, self.branch, self.start, self.base = tree, branch, start, base
        self.escaped: list[str] = []
        if dot_git is not None and (
            not (tree / ".git").is_file() or (tree / ".git").read_bytes() != dot_git
        ):
            # It would point every git command below at another repository: put it back.
            _remove(tree / ".git")
            (tree / ".git").write_bytes(dot_git)
            self.escaped.append(".git")
        # The branch as it was; the agent's commits and checkouts are flattened into the
        # files it left, which is what is judged.
        git(tree, "update-ref", "--no-deref", "HEAD", start)
        git(tree, "update-ref", branch, start)
        git(tree, "symbolic-ref", "HEAD", branch)
        git(tree, "read-tree", start)  # the index as the branch has it, then the files
        git(tree, "add", "--all", "--", ".", *NOT_THE_AGENTS)
        self.tree_id = git(tree, "write-tree")
        self.changes = _changes(tree, base)
        self.files = tuple(path for _, path in self.changes)
        self.lines = _count_lines(tree, base)
        self.diff_text = git(tree, "diff", "--cached", base) if self.changes else ""

    def refusal(self, protected: Sequence[str], max_lines: int) -> Refusal | None:
        escaped = self.escaped + _escapes(self.tree, self.changes)
        if escaped:
            return Refusal(
                "agent_escaped_worktree",
                "the agent's changes reach outside the worktree: " + "; ".join(escaped[:5]),
                tuple(self.files[:50]),
            )
        touched = [path for path in self.files if _protected(path, protected)]
        if touched:
            return Refusal(
                "agent_edited_protected",
                f"the agent changed the reproduction's tests: {', '.join(touched[:5])}",
                tuple(touched),
            )
        if not self.changes:
            return Refusal("agent_no_change", "the agent left the worktree as it found it")
        if self.lines > max_lines:
            return Refusal(
                "agent_diff_too_large",
                f"the diff has {self.lines} changed lines; the policy allows {max_lines}",
                tuple(self.files[:50]),
            )
        secrets = _added_secrets(self.diff_text)
        if secrets:
            return Refusal(
                "agent_diff_has_secret",
                f"added lines look like secrets, at {', '.join(secrets[:5])} (not repeated here)",
                tuple(sorted({s.rsplit(" line ", 1)[0] for s in secrets})),
            )
        return None

    def commit(self, message: str) -> str:
        if self.tree_id == git(self.tree, "rev-parse", f"{self.start}^{{tree}}"):
            return self.start  # already the branch's tree: the agent's commits were it
        head = git(self.tree, "commit-tree", self.tree_id, "-p", self.start, "-m", message,
                   identity=IDENTITY)  # fmt: skip
        git(self.tree, "update-ref", self.branch, head, self.start)
        git(self.tree, "reset", "--quiet")
        return head

    def undo(self) -> None:
        """Put the worktree back where the agent found it: the branch at its start, the
        files as they were, the files the agent added removed."""
        git(self.tree, "reset", "--quiet", "--hard", self.start)
        added = [path for status, path in self.changes if status == "A"]
        if added:
            git(self.tree, "clean", "--quiet", "--force", "--", *(f":(literal){p}" for p in added))


def _changes(tree: Path, base: str) -> list[tuple[str, str]]:
    """``(status, path)`` of each change between ``base`` and the staged tree; a rename or
    copy is its old and its new path."""
    out = git(tree, "diff", "--cached", "--name-status", "-z", "--no-renames", base)
    fields = [f for f in out.split("\0") if f]
    return [(fields[i], fields[i + 1]) for i in range(0, len(fields) - 1, 2)]


def _count_lines(tree: Path, base: str) -> int:
    """Added plus deleted lines; a binary file counts as one."""
    total = 0
    for line in git(tree, "diff", "--cached", "--numstat", "--no-renames", base).splitlines():
        added, deleted, _ = line.split("\t", 2)
        total += 1 if added == "-" else int(added) + int(deleted)
    return total


def _escapes(tree: Path, changes: list[tuple[str, str]]) -> list[str]:
    """What in the staged changes reaches outside the worktree."""
    found = []
    staged = {}
    paths = [path for status, path in changes if status != "D"]
    if paths:
        out = git(tree, "ls-files", "--stage", "-z", "--", *(f":(literal){p}" for p in paths))
        for entry in filter(None, out.split("\0")):
            meta, _, path = entry.partition("\t")
            mode, blob, _ = meta.split(" ", 2)
            staged[path] = (mode, blob)
    for _status, path in changes:
        parts = PurePosixPath(path).parts
        if path.startswith("/") or ".." in parts:
            found.append(f"{path} is a path outside the worktree")
            continue
        mode, blob = staged.get(path, ("", ""))
        if mode == "160000":
            found.append(f"{path} is a nested Git repository")
        elif mode == "120000":
            target = git(tree, "cat-file", "blob", blob)
            if not _inside(PurePosixPath(path).parent, target):
                found.append(f"{path} is a symbolic link to {redact(target)[:200]}")
    return found


def _inside(directory: PurePosixPath, target: str) -> bool:
    """Whether a link in ``directory`` (relative to the worktree) to ``target`` stays in it."""
    if target.startswith("/"):
        return False
    depth = len(directory.parts)
    for part in PurePosixPath(target).parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part != ".":
            depth += 1
    return True


def _protected(path: str, protected: Sequence[str]) -> bool:
    for entry in protected:
        wanted = entry.split("::", 1)[0].strip().removeprefix("./").rstrip("/")
        if wanted and (path == wanted or path.startswith(f"{wanted}/")):
            return True
    return False


def _added_secrets(diff: str) -> list[str]:
    """``<file> line <n>`` of each added line of a unified diff that looks like a secret."""
    found = []
    file, number = "", 0
    for line in diff.split("\n"):
        if line.startswith("+++ "):
            file = line[6:] if line.startswith("+++ b/") else line[4:]
        elif line.startswith("@@"):
            hunk = re.search(r"\+(\d+)", line)
            number = int(hunk[1]) if hunk else 0
        elif line.startswith("+"):
            if secret_findings(line[1:]):
                found.append(f"{file} line {number}")
            number += 1
        elif not line.startswith("-"):
            number += 1
    return found


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _message(branch: str, agent: AgentPolicy, output: AgentOutput) -> str:
    found = _BRANCH.match(branch)
    quest = found["quest"] if found else branch.removeprefix("refs/heads/")
    said = f"\n\nThe agent said:\n{output.message[:1000]}" if output.message else ""
    return (
        f"Ephyra: the coding agent's patch for quest {quest}\n\n"
        f"Written by the coding agent ({agent.output} output) through Ephyra's agent contract; "
        f"judged by its diff.{said}\n"
    )


def _read_output(result: RunResult) -> str:
    try:
        with open(result.output_path, "rb") as file:
            return file.read(MAX_OUTPUT_READ).decode("utf-8", errors="replace")
    except OSError:
        return result.output_excerpt
