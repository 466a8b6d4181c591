"""The autonomy policy: checked here exactly as the server checks it (``ephyra.policy``, no
server needed), proposed, shown, and decided with four eyes on the server."""

from __future__ import annotations

import sys
from pathlib import Path

from ephyra.cli.context import Context, UsageError
from ephyra.cli.http import EXIT_OK, EXIT_USAGE
from ephyra.cli.output import short_time, state_style


def register(commands, common) -> None:
    policy = commands.add_parser("policy", parents=[common], help="the autonomy policy")
    subs = policy.add_subparsers(title="policy commands", metavar="COMMAND")
    policy.set_defaults(run=lambda ctx: _help(policy))

    check = subs.add_parser(
        "check",
        parents=[common],
        help="check a policy file locally, as the server would (exit 2 if invalid)",
    )
    check.add_argument("file", metavar="FILE", help="the YAML policy, or - for stdin")
    check.set_defaults(run=run_check)

    propose = subs.add_parser(
        "propose", parents=[common], help="propose a policy file (another admin approves it)"
    )
    propose.add_argument("file", metavar="FILE", help="the YAML policy, or - for stdin")
    propose.add_argument("-m", "--note", default="", help="a note for the approver")
    propose.set_defaults(run=run_propose)

    show = subs.add_parser(
        "show", parents=[common], help="print a version's text (default: the current one)"
    )
    show.add_argument("number", metavar="N", nargs="?", type=int, help="the version's number")
    show.set_defaults(run=run_show)

    versions = subs.add_parser("versions", parents=[common], help="list the versions")
    versions.set_defaults(run=run_versions)

    for name, text in (("approve", "approve a proposal (not your own)"),
                       ("reject", "reject a proposal"),
                       ("withdraw", "withdraw your own proposal")):  # fmt: skip
        decide = subs.add_parser(name, parents=[common], help=text)
        decide.add_argument("proposal", metavar="ID", help="the proposal's id")
        decide.add_argument("-m", "--reason", default="", help="why (a rejection needs one)")
        decide.set_defaults(run=_decide(name))


def _help(parser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def read_text(name: str) -> str:
    if name == "-":
        return sys.stdin.read()
    try:
        # universal newlines: the text is stored and digested with "\n" line ends
        return Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(f"{name}: cannot read: {reason}") from None


def check_text(ctx: Context, name: str, text: str) -> bool:
    """Print the problems (``file:line: field.path: message``) and say whether it is valid."""
    from ephyra.policy import PolicyError, parse_policy  # see local.run_replay

    source = "<stdin>" if name == "-" else name
    try:
        parse_policy(text, source=source)
    except PolicyError as invalid:
        if ctx.out.as_json:
            ctx.out.json(
                {
                    "ok": False,
                    "problems": [
                        {"line": line, "path": path, "message": message}
                        for path, line, message in invalid.problems
                    ],
                }
            )
        else:
            ctx.out.error(f"{source}: invalid policy")
            for path, line, message in invalid.problems:
                where = line if line is not None else "?"
                ctx.out.note(f"{source}:{where}: {path or '(top)'}: {message}")
        return False
    return True


def policy_digest(text: str) -> str:
    from ephyra.policy.autonomy import policy_digest as digest

    return digest(text)


def run_check(ctx: Context) -> int:
    name = ctx.args.file
    text = read_text(name)
    if not check_text(ctx, name, text):
        return EXIT_USAGE
    digest = policy_digest(text)
    if ctx.out.as_json:
        ctx.out.json({"ok": True, "problems": [], "digest": digest})
    else:
        ctx.out.line(f"{name}: a valid policy ({digest})")
    return EXIT_OK


def run_propose(ctx: Context) -> int:
    name = ctx.args.file
    text = read_text(name)
    if not check_text(ctx, name, text):  # the server would refuse it the same way
        return EXIT_USAGE
    workspace = ctx.workspace()
    answer = ctx.client().post(
        f"workspaces/{workspace}/policy/proposals", {"text": text, "note": ctx.args.note}
    )
    if ctx.out.as_json:
        ctx.out.json(answer)
        return EXIT_OK
    ctx.out.line(
        f"Proposed {answer.get('digest') or policy_digest(text)} for {workspace} as proposal "
        f"{answer.get('id')}; another admin approves it with "
        f"`ephyra policy approve {answer.get('id')}`"
    )
    return EXIT_OK


def run_versions(ctx: Context) -> int:
    workspace = ctx.workspace()
    answer = ctx.client().get(f"workspaces/{workspace}/policy/versions")
    if ctx.out.as_json:
        ctx.out.json(answer)
        return EXIT_OK
    ctx.out.table(
        ["N", "DIGEST", "CURRENT", "BY", "AT"],
        [
            [
                v.get("number"),
                str(v.get("digest", ""))[:19],
                "current" if v.get("current") else "",
                v.get("reviewed_by"),
                short_time(v.get("created_at")),
            ]
            for v in answer.get("results", [])
        ],
        empty=f"{workspace} has no policy version of its own: it follows the built-in default.",
    )
    proposals = answer.get("proposals") or []
    if proposals:
        ctx.out.line()
        ctx.out.table(
            ["PROPOSAL", "STATE", "DIGEST", "PROPOSED BY", "DECIDED BY", "NOTE"],
            [
                [
                    p.get("id"),
                    p.get("state"),
                    str(p.get("digest", ""))[:19],
                    p.get("proposed_by"),
                    p.get("decided_by") or "",
                    p.get("note") or p.get("reason") or "",
                ]
                for p in proposals
            ],
            styles={1: state_style},
        )
    return EXIT_OK


def _versions(ctx: Context, workspace: str) -> list[dict]:
    return ctx.client().get(f"workspaces/{workspace}/policy/versions").get("results", [])


def run_show(ctx: Context) -> int:
    workspace, number = ctx.workspace(), ctx.args.number
    if number is None:
        current = [v for v in _versions(ctx, workspace) if v.get("current")]
        if not current:
            ctx.out.note(f"{workspace} follows the built-in default policy")
            return EXIT_OK
        number = current[0].get("number")
    answer = ctx.client().get(f"workspaces/{workspace}/policy/versions/{number}")
    if ctx.out.as_json:
        ctx.out.json(answer if isinstance(answer, dict) else {"number": number, "text": answer})
        return EXIT_OK
    text = answer.get("text", "") if isinstance(answer, dict) else answer
    ctx.out.out.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def _decide(action: str):
    def run(ctx: Context) -> int:
        workspace, proposal = ctx.workspace(), ctx.args.proposal
        answer = ctx.client().post(
            f"workspaces/{workspace}/policy/proposals/{proposal}/{action}",
            {"reason": ctx.args.reason},
        )
        if ctx.out.as_json:
            ctx.out.json(answer)
            return EXIT_OK
        state = str(answer.get("state") or action)
        ctx.out.line(f"proposal {proposal}: {ctx.out.paint(state, state_style(state))}")
        return EXIT_OK

    return run
