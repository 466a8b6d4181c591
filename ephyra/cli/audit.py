"""The audit trail: the workspace's hash-chained log, and the check of its chain."""

from __future__ import annotations

from ephyra.cli.context import Context
from ephyra.cli.http import EXIT_OK, EXIT_REFUSED
from ephyra.cli.ledger import pages
from ephyra.cli.output import short_time


def register(commands, common) -> None:
    audit = commands.add_parser("audit", parents=[common], help="the audit trail")
    audit.add_argument("--all", action="store_true", help="every page, not only the first")
    audit.set_defaults(run=run_list)
    subs = audit.add_subparsers(title="audit commands", metavar="COMMAND")
    verify = subs.add_parser(
        "verify",
        parents=[common],
        help="check the hash chain and its anchors (exit 1 when broken)",
    )
    verify.set_defaults(run=run_verify)


def run_list(ctx: Context) -> int:
    workspace = ctx.workspace()
    rows, page = pages(ctx, f"workspaces/{workspace}/audit", ctx.args.all)
    if ctx.out.as_json:
        ctx.out.json({**page, "results": rows})
        return 0
    ctx.out.table(
        ["SEQ", "AT", "ACTOR", "ACTION", "OBJECT"],
        [
            [
                r.get("sequence"),
                short_time(r.get("at")),
                r.get("actor"),
                r.get("action"),
                r.get("subject") or r.get("quest") or "",
            ]
            for r in rows
        ],
        empty="The audit trail is empty.",
    )
    if page.get("next") and not ctx.args.all:
        ctx.out.note("more on the next page; --all for every one")
    return 0


def run_verify(ctx: Context) -> int:
    workspace = ctx.workspace()
    answer = ctx.client().post(f"workspaces/{workspace}/audit/verify")
    ok = bool(answer.get("ok"))
    if ctx.out.as_json:
        ctx.out.json(answer)
    elif ok:
        ctx.out.line(
            f"{workspace}: the audit chain holds ({answer.get('entries')} entries) "
            + ctx.out.paint("ok", "green")
        )
    else:
        bad, verified = answer.get("first_bad"), answer.get("entries")
        ctx.out.line(
            f"{workspace}: the audit chain is {ctx.out.paint('BROKEN', 'red')} at entry {bad} "
            f"({verified} verified before it)"
        )
        if answer.get("problem"):
            ctx.out.line(str(answer["problem"]))
    return EXIT_OK if ok else EXIT_REFUSED
