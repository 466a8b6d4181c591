"""The remote, through the git command line: read its base branch, and push to it with a
compare-and-swap. The one module of ``ephyra.landing`` that talks to another machine.

The git CLI does the transport (file, SSH, HTTPS), so a remote works here exactly as it does
for a person. Credentials never pass through Ephyra: git's own helper (the worker user's
``credential.helper``, an SSH agent or key) supplies them, or a git-credentials file named by
the setting ``EPHYRA_GIT_CREDENTIALS_FILE``, read by ``git credential-store`` for ``get`` only
(a rejected password never erases the operator's file, and nothing is ever stored into it).
Git never prompts: a missing credential is a failure, not a hung worker.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ephyra.landing.results import NoAnswer

# The private namespace of the mirror where what landing fetched or prepared is kept. Not
# under refs/ephyra/ (the journals, pushed to the remote) and not under refs/heads/.
PRIVATE = "refs/ephyra-landing/"
# Variables that point git at another repository or configuration: a hook or a parent git
# process may have set them, and every command here must work on the mirror it is given.
_REPOSITORY_VARIABLES = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_NAMESPACE",
        "GIT_PREFIX",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_QUARANTINE_PATH",
        "GIT_SHALLOW_FILE",
        "GIT_GRAFT_FILE",
        "GIT_REPLACE_REF_BASE",
        "GIT_NO_REPLACE_OBJECTS",
    }
)
DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class PushAnswer:
    """git's answer for the one ref pushed: ``flag`` as ``git push --porcelain`` prints it
    (`` `` fast-forward, ``*`` new, ``=`` up to date, ``!`` rejected, ``+`` forced) and its
    summary (``[rejected] (stale info)``, ``[remote rejected] (pre-receive hook declined)``)."""

    flag: str
    summary: str

    @property
    def accepted(self) -> bool:
        return self.flag in {" ", "*", "="}


def git(
    mirror: Path,
    *args: str,
    credentials: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    sent: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``git --git-dir <mirror> …`` without a terminal, in the C locale. A command still
    running at ``timeout`` is killed with its whole process group (ssh, a remote helper) and
    raises ``NoAnswer`` (with ``sent``: whether the command may have written)."""
    command = ["git", *credential_options(credentials), "--git-dir", str(mirror), *args]
    return _run(command, args[0], timeout=timeout, sent=sent)


def git_in(
    worktree: Path, *args: str, timeout: float = DEFAULT_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run ``git -C <worktree> …`` (a worktree's own commands, such as ``reset``)."""
    return _run(["git", "-C", str(worktree), *args], args[0], timeout=timeout, sent=False)


def _run(
    command: list[str], what: str, *, timeout: float, sent: bool
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _REPOSITORY_VARIABLES}
    env.update(LC_ALL="C", GIT_TERMINAL_PROMPT="0", GCM_INTERACTIVE="never")
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own group, so a timeout kills ssh and helpers with it
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise NoAnswer(f"git {what} gave no answer in {timeout:g} s", sent=sent) from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def credential_options(credentials: Path | None) -> list[str]:
    """The ``-c`` options that make git read credentials from the file, and only from it."""
    if credentials is None:
        return []  # git's own configuration decides
    store = shlex.quote(f"--file={Path(credentials).resolve()}")
    # An empty helper first clears the helpers of git's configuration: the file is the one
    # source. The function answers `get` only, so `store` and `erase` leave the file as it is.
    helper = f'!f() {{ if [ "$1" = get ]; then git credential-store {store} get; fi; }}; f'
    return ["-c", "credential.helper=", "-c", f"credential.helper={helper}"]


def tracking_ref(base_branch: str) -> str:
    """Where the remote's base branch is fetched to in the mirror."""
    return f"{PRIVATE}remote/{base_branch}"


def fetch_base(
    mirror: Path,
    remote: str,
    base_branch: str,
    *,
    credentials: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> str | None:
    """Fetch the remote's base branch into the mirror (``tracking_ref``) and return its commit;
    None when the remote has no such branch. ``NoAnswer`` when the remote cannot be read."""
    done = git(
        mirror,
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--",
        remote,
        f"+refs/heads/{base_branch}:{tracking_ref(base_branch)}",
        credentials=credentials,
        timeout=timeout,
    )
    if done.returncode != 0:
        said = done.stderr.strip()
        if "couldn't find remote ref" in said:
            return None
        raise NoAnswer(f"cannot read {base_branch} of {remote}: {said}", sent=False)
    return git(mirror, "rev-parse", "--verify", "--quiet", tracking_ref(base_branch)).stdout.strip()


def push_with_lease(
    mirror: Path,
    remote: str,
    base_branch: str,
    *,
    commit: str,
    expected: str,
    credentials: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> PushAnswer:
    """``git push <remote> <commit>:refs/heads/<base> --force-with-lease=refs/heads/<base>:
    <expected>``: the remote takes the commit only while its base is exactly ``expected``
    (the receiving side checks it again under the ref's lock). Never ``--force``, never a
    ``+`` refspec. The caller makes sure ``commit`` descends from ``expected``, so the push
    that passes the lease is a fast-forward and drops nothing. ``NoAnswer`` (sent) when git
    said nothing about the ref: the push may or may not have landed."""
    ref = f"refs/heads/{base_branch}"
    done = git(
        mirror,
        "push",
        "--porcelain",
        f"--force-with-lease={ref}:{expected}",
        "--",
        remote,
        f"{commit}:{ref}",
        credentials=credentials,
        timeout=timeout,
        sent=True,
    )
    # --porcelain: "<flag>\t<src>:<dst>\t<summary>" for each ref (git-push(1)).
    for line in done.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and len(parts[0]) == 1 and parts[1].endswith(f":{ref}"):
            return PushAnswer(parts[0], parts[2].strip())
    said = done.stderr.strip() or f"exit {done.returncode}"
    raise NoAnswer(f"git push to {remote} gave no answer for {base_branch}: {said}", sent=True)


def update_mirror_base(mirror: Path, base_branch: str, commit: str) -> None:
    """Move the mirror's own ``refs/heads/<base>`` to what the remote's base now is, forward
    only (a compare-and-swap on the value read): the mirror keeps showing the remote as it was
    last seen, and a quest that starts next starts from the landed base."""
    ref = f"refs/heads/{base_branch}"
    current = git(mirror, "rev-parse", "--verify", "--quiet", ref).stdout.strip()
    if current == commit:
        return
    if current:
        ancestor = git(mirror, "merge-base", "--is-ancestor", current, commit)
        if ancestor.returncode != 0:
            return  # the mirror shows something else; whatever updates it decides
    git(mirror, "update-ref", ref, commit, current or "0" * 40)
