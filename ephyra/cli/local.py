"""``ephyra replay FILE``: the pure replay of ``ephyra.replay`` (the same as ``manage.py
replay`` and ``ephyra-replay``), no server and no database needed. Its exit codes fit the
command line's: 1 when the machine refuses an event, 2 when the file or policy cannot be read."""

from __future__ import annotations

from pathlib import Path

from ephyra.cli.context import Context


def register(commands, common) -> None:
    replay = commands.add_parser(
        "replay",
        parents=[common],
        help="fold a file of events through the machine locally; one JSON line per decision",
    )
    replay.add_argument("file", metavar="FILE", type=Path, help="events as JSON lines")
    replay.add_argument(
        "--policy",
        type=Path,
        help="autonomy policy (YAML); default: the built-in default policy",
    )
    replay.set_defaults(run=run_replay)


def run_replay(ctx: Context) -> int:
    # imported here: the machine and pydantic cost a server command's start for nothing
    from ephyra.policy import DEFAULT_POLICY_PATH
    from ephyra.replay import replay_file

    policy = ctx.args.policy or DEFAULT_POLICY_PATH
    return replay_file(ctx.args.file, policy, ctx.out.out, ctx.out.err)
