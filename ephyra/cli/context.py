"""What every command gets: its arguments, the output, and (for server commands) the client
and the workspace it acts in."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from ephyra.cli import config as config_module
from ephyra.cli.http import EXIT_USAGE, ApiError, Client
from ephyra.cli.output import Output


class UsageError(Exception):
    """A command that cannot run as given (exit 2); the message says what is missing."""

    exit_code = EXIT_USAGE


@dataclass
class Context:
    args: argparse.Namespace
    out: Output
    _client: Client | None = field(default=None, init=False)
    _config: config_module.Config | None = field(default=None, init=False)

    @property
    def config(self) -> config_module.Config:
        if self._config is None:
            self._config = config_module.load(getattr(self.args, "workspace", "") or "")
        return self._config

    def client(self) -> Client:
        if self._client is None:
            if not self.config.url:
                raise UsageError(
                    "no server: run `ephyra login`, or set EPHYRA_URL and EPHYRA_TOKEN"
                )
            self._client = Client(self.config.url, self.config.token)
        return self._client

    def workspace(self) -> str:
        """The workspace to act in: ``--workspace``, ``EPHYRA_WORKSPACE``, the one saved by
        login, or the only one the token can read."""
        if self.config.workspace:
            return self.config.workspace
        spaces = [w["slug"] for w in self.client().get("me").get("workspaces", [])]
        if len(spaces) == 1:
            return spaces[0]
        if not spaces:
            raise ApiError(403, "this token reads no workspace")
        raise UsageError(
            f"which workspace? pass --workspace (one of: {', '.join(sorted(spaces))}) "
            "or set EPHYRA_WORKSPACE"
        )

    def quest_ref(self, text: str) -> tuple[str, str]:
        """``WS/QUEST`` names its workspace; a bare ``QUEST`` is in the current workspace."""
        if "/" in text:
            workspace, _, quest = text.partition("/")
            if workspace and quest:
                return workspace, quest
            raise UsageError(f"{text!r} is not a quest: write QUEST or WORKSPACE/QUEST")
        return self.workspace(), text
