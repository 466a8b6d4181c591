"""Who and where: log in (the token is checked before it is saved), log out, who am I, which
workspaces can I read."""

from __future__ import annotations

import getpass
import sys

from ephyra.cli import config
from ephyra.cli.context import Context, UsageError
from ephyra.cli.http import Client


def register(commands, common) -> None:
    login = commands.add_parser(
        "login",
        parents=[common],
        help="save the server's URL and your API token (checked first)",
        description="Asks for what is not given. The token is checked with GET /api/v1/me "
        "before it is saved to $XDG_CONFIG_HOME/ephyra/config.json (mode 0600). Without "
        "--token and without a terminal, the token is read from the first line of stdin.",
    )
    login.add_argument("--url", help="the server, e.g. https://ephyra.example.com")
    login.add_argument("--token", help="an API token (eph_…); safer from stdin or the prompt")
    login.set_defaults(run=run_login)

    logout = commands.add_parser("logout", parents=[common], help="forget the saved token")
    logout.set_defaults(run=run_logout)

    whoami = commands.add_parser("whoami", parents=[common], help="who the token acts as")
    whoami.set_defaults(run=run_whoami)

    spaces = commands.add_parser("workspaces", parents=[common], help="the workspaces you read")
    spaces.set_defaults(run=run_workspaces)


def run_login(ctx: Context) -> int:
    args = ctx.args
    saved = config.read_file()
    url = config.normal_url(args.url or _ask("Server URL", saved.url))
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"{url or 'the URL'!r} is not an http(s) URL")
    token = (args.token or _ask_token()).strip()
    if not token:
        raise UsageError("no token given")
    me = Client(url, token).get("me")  # a refused token raises: nothing is saved
    workspace = args.workspace or (saved.workspace if saved.url == url else "")
    path = config.write_file(config.Config(url=url, token=token, workspace=workspace))
    if ctx.out.as_json:
        ctx.out.json({"url": url, "username": me.get("username"), "config": str(path)})
        return 0
    ctx.out.line(f"Logged in to {url} as {me.get('username')}; saved to {path}")
    return 0


def _ask(prompt: str, default: str) -> str:
    if not sys.stdin.isatty():
        raise UsageError(f"{prompt}: pass it as an option (no terminal to ask on)")
    shown = f" [{default}]" if default else ""
    return input(f"{prompt}{shown}: ").strip() or default


def _ask_token() -> str:
    if sys.stdin.isatty():
        return getpass.getpass("API token: ")
    return sys.stdin.readline()


def run_logout(ctx: Context) -> int:
    removed = config.remove_file()
    if ctx.out.as_json:
        ctx.out.json({"removed": str(removed) if removed else None})
    elif removed:
        ctx.out.line(f"Logged out: removed {removed}")
    else:
        ctx.out.line("Not logged in: there was no saved token")
    return 0


def run_whoami(ctx: Context) -> int:
    me = ctx.client().get("me")
    if ctx.out.as_json:
        ctx.out.json(me)
        return 0
    ctx.out.line(f"{me.get('username')} at {ctx.config.url}")
    _workspace_table(ctx, me.get("workspaces", []))
    return 0


def run_workspaces(ctx: Context) -> int:
    answer = ctx.client().get("workspaces")
    rows = answer.get("results", answer) if isinstance(answer, dict) else answer
    if ctx.out.as_json:
        ctx.out.json(answer)
        return 0
    mine = {w["slug"]: w.get("roles", []) for w in ctx.client().get("me").get("workspaces", [])}
    ctx.out.table(
        ["WORKSPACE", "NAME", "ROLES"],
        [[w.get("slug"), w.get("name", ""), mine.get(w.get("slug"), [])] for w in rows],
    )
    return 0


def _workspace_table(ctx: Context, spaces: list[dict]) -> None:
    current = ctx.config.workspace
    ctx.out.table(
        ["WORKSPACE", "ROLES", ""],
        [
            [w.get("slug"), w.get("roles", []), "current" if w.get("slug") == current else ""]
            for w in spaces
        ],
    )
