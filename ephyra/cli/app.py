"""The parser and the dispatch: each topic module adds its commands; ``main`` runs one and turns
what went wrong into a message on stderr and the exit code docs/cli.md lists."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ephyra.cli import (
    account,
    audit,
    completion,
    ledger,
    local,
    missions,
    policy,
    quests,
    watch,
)
from ephyra.cli.config import ConfigError
from ephyra.cli.context import Context, UsageError
from ephyra.cli.http import EXIT_USAGE, ApiError
from ephyra.cli.output import Output

TOPICS = (account, quests, watch, ledger, audit, policy, missions, local, completion)


def common_options(defaults: bool = False) -> argparse.ArgumentParser:
    """Options every command takes, before or after its name (``ephyra quests --json``).
    A subcommand's copies suppress their defaults so they do not undo one given earlier; the
    top level's have the real ones (separate objects: argparse shares parents' actions)."""
    common = argparse.ArgumentParser(add_help=False)
    unset = argparse.SUPPRESS
    common.add_argument(
        "--json",
        action="store_true",
        default=False if defaults else unset,
        help="print JSON for scripts",
    )
    common.add_argument(
        "--no-color", action="store_true", default=False if defaults else unset, help="no colour"
    )
    common.add_argument(
        "-w",
        "--workspace",
        default="" if defaults else unset,
        metavar="WS",
        help="the workspace to act in (default: EPHYRA_WORKSPACE, the login's, or the only one)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = common_options()
    parser = argparse.ArgumentParser(
        prog="ephyra",
        description="Ephyra from a terminal: quests, checkpoints, the ledger, the audit trail, "
        "the policy and missions, over the HTTP API. See docs/cli.md.",
        parents=[common_options(defaults=True)],
    )
    # The completion command reads the whole parser, handed to it here rather than imported.
    parser.set_defaults(run=None, root_parser=parser)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for topic in TOPICS:
        topic.register(commands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = Output(as_json=args.json, colour=False if args.no_color else None)
    if args.run is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.run(Context(args, out)) or 0
    except ApiError as failure:
        first, *rest = failure.lines()
        out.error(first)
        for text in rest:
            out.note(text)
        return failure.exit_code
    except (UsageError, ConfigError) as failure:
        out.error(str(failure))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
