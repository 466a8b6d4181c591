"""The operation ledger: what the worker did or must do, and an admin's verdict on an
operation whose outcome nobody can tell (ambiguous)."""

from __future__ import annotations

from ephyra.cli.context import Context
from ephyra.cli.output import short_time, state_style

VERDICTS = ["done", "absent", "dead"]


def register(commands, common) -> None:
    ledger = commands.add_parser("ledger", parents=[common], help="the operation ledger")
    ledger.add_argument("--state", help="only operations in this state (e.g. ambiguous)")
    ledger.add_argument("--type", help="only operations of this effect type")
    ledger.add_argument("--all", action="store_true", help="every page, not only the first")
    ledger.set_defaults(run=run_list)
    subs = ledger.add_subparsers(title="ledger commands", metavar="COMMAND")
    resolve = subs.add_parser(
        "resolve", parents=[common], help="settle an operation: done, absent or dead"
    )
    resolve.add_argument("key", metavar="KEY", help="the operation's key")
    resolve.add_argument("--verdict", required=True, choices=VERDICTS, help="what happened")
    resolve.add_argument("-m", "--note", required=True, help="how you know")
    resolve.set_defaults(run=run_resolve)


def pages(ctx: Context, path: str, every: bool, **query) -> tuple[list[dict], dict]:
    """The first page, or every page when ``every``: rows and the last page's envelope."""
    rows, cursor = [], None
    while True:
        page = ctx.client().get(path, **query, cursor=cursor)
        rows.extend(page.get("results", []))
        cursor = page.get("next")
        if not cursor or not every:
            return rows, page


def run_list(ctx: Context) -> int:
    workspace = ctx.workspace()
    args = ctx.args
    rows, page = pages(
        ctx, f"workspaces/{workspace}/ledger", args.all, state=args.state, type=args.type
    )
    if ctx.out.as_json:
        ctx.out.json({**page, "results": rows})
        return 0
    ctx.out.table(
        ["KEY", "TYPE", "STATE", "QUEST", "ATTEMPTS", "UPDATED"],
        [
            [
                r.get("key"),
                r.get("type"),
                r.get("state"),
                r.get("quest"),
                r.get("attempts"),
                short_time(r.get("updated_at")),
            ]
            for r in rows
        ],
        styles={2: state_style},
        empty="No operations match.",
    )
    if page.get("next") and not args.all:
        ctx.out.note("more on the next page; --all for every one")
    return 0


def run_resolve(ctx: Context) -> int:
    workspace, args = ctx.workspace(), ctx.args
    answer = ctx.client().post(
        f"workspaces/{workspace}/ledger/{args.key}/resolve",
        {"verdict": args.verdict, "note": args.note},
    )
    if ctx.out.as_json:
        ctx.out.json(answer)
        return 0
    state = answer.get("state") or answer.get("status") or "recorded"
    ctx.out.line(f"{args.key}: {args.verdict}; {ctx.out.state(str(state))}")
    return 0
