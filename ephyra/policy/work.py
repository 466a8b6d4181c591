"""The ``work`` and ``agent`` sections of the policy: how a workspace builds and tests itself,
and which coding agent (if any) writes a patch a revert cannot.

A command is written as a list of words (``[.venv/bin/python, -m, pytest]``) or as one string
split like a shell would (``".venv/bin/python -m pytest"``) but never run through a shell: write
``[sh, -c, "..."]`` to get one. Everything here is validated with the rest of the policy, its
errors reported with their line (``parse_policy``).
"""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

# A variable a command may see: its name only; the value is the worker's own.
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=100)]
# Variables no command ever sees, whatever the policy says: Ephyra's own configuration.
NEVER_PASSED = re.compile(
    r"^(DATABASE_URL|REDIS_URL|SECRET_KEY(_FILE)?|EPHYRA_.*|DJANGO_.*|CELERY_.*)$"
)
DEFAULT_SETUP_FILES = (
    "pyproject.toml",
    "setup.cfg",
    "setup.py",
    "requirements*.txt",
    "poetry.lock",
    "uv.lock",
    "Pipfile.lock",
)


def _words(value: object) -> object:
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split the command into words: {exc}") from None
    return value


Command = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=4000)]],
    BeforeValidator(_words),
    Field(min_length=1, max_length=200),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkLimits(_Strict):
    """Seconds of wall clock per command kind, and the memory any command may take."""

    setup_seconds: int = Field(default=900, ge=1, le=86_400)
    test_seconds: int = Field(default=600, ge=1, le=86_400)
    probe_seconds: int = Field(default=120, ge=1, le=86_400)
    lint_seconds: int = Field(default=300, ge=1, le=86_400)
    memory_mb: int = Field(default=4096, ge=64, le=1_048_576)


class WorkPolicy(_Strict):
    """How a checkout of the workspace is prepared and tested.

    - ``setup``: commands that prepare a checkout (a virtual environment, an install), run once
      per commit tested and skipped when the ``setup_files`` have not changed since the last
      setup in that checkout (their Git tree ids are compared);
    - ``test``: the command that runs the suite (for pytest, Ephyra asks it for a JUnit XML
      report and reads each failing test from it);
    - ``probe``: a reproduction that is not a test, tried when the suite does not reproduce;
    - ``lint``: optional; ``checks``: more named commands the proof matrix may name;
    - ``known_good``: a ref or commit known to be free of regressions, where locating starts
      when no deployment says better; ``walk_back``: how far back (in first-parent commits)
      locating may look for a good commit when nothing says where one is;
    - ``env``: the names of the variables a command may see (Ephyra's own never pass);
    - ``runner``: ``local`` (a process group with limits) or ``sandbox`` (bubblewrap: no
      network, a read-only system, only the checkout writable).
    """

    runner: Literal["local", "sandbox"] = "local"
    setup: list[Command] = []
    setup_files: list[Annotated[str, Field(min_length=1, max_length=200)]] = list(
        DEFAULT_SETUP_FILES
    )
    test: Command | None = None
    probe: Command | None = None
    lint: Command | None = None
    checks: dict[Annotated[str, Field(pattern=r"^[a-z0-9_.-]+$", max_length=100)], Command] = {}
    known_good: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    walk_back: int = Field(default=256, ge=1, le=100_000)
    env: list[EnvName] = []
    limits: WorkLimits = WorkLimits()

    @field_validator("env")
    @classmethod
    def _not_ephyras_own(cls, names: list[str]) -> list[str]:
        forbidden = [name for name in names if NEVER_PASSED.match(name)]
        if forbidden:
            raise ValueError(
                f"{', '.join(forbidden)}: Ephyra's own settings are never passed to a command"
            )
        return names


class AgentPolicy(_Strict):
    """The coding agent a quest calls when a revert is not the patch (a conflict, no culprit).

    ``command`` runs in the quest's checkout through the same runner as every other command;
    ``{prompt_file}`` in it is replaced by the path of the prompt, and the prompt is also on
    its standard input's place as a file (stdin itself is closed). ``output``: how to read what
    it printed (``claude`` for ``claude -p --output-format json``, ``codex`` for ``codex exec
    --json``, ``aider``, or ``plain``: the exit status and the diff alone). ``api_key_env``: the
    one variable holding its key that it may see. The diff it leaves in the checkout is what
    counts, never its own claim; ``max_diff_lines`` bounds it.
    """

    command: Command
    output: Literal["claude", "codex", "aider", "plain"] = "plain"
    timeout_seconds: int = Field(default=900, ge=10, le=86_400)
    max_cost_micros: int = Field(default=5_000_000, ge=0)
    api_key_env: EnvName | None = None
    max_diff_lines: int = Field(default=400, ge=1, le=100_000)

    @field_validator("api_key_env")
    @classmethod
    def _not_ephyras_own(cls, name: str | None) -> str | None:
        if name is not None and NEVER_PASSED.match(name):
            raise ValueError(f"{name}: Ephyra's own settings are never passed to a command")
        return name
