"""Quests: the list (the inbox's filters), one quest in full, and a person's actions on it.

Every action first reads the quest (or takes ``--head``) and sends the journal head it saw, so
a quest that moved in between is refused (409) instead of being decided blind."""

from __future__ import annotations

from typing import Any

from ephyra.cli.context import Context, UsageError
from ephyra.cli.output import short_time, state_style
from ephyra.core.states import CHECKPOINT_STATE, MAIN_LINE

CHECKPOINT_AT = {str(state): str(cp) for cp, state in CHECKPOINT_STATE.items()}
PAGE = 50


def register(commands, common) -> None:
    listing = commands.add_parser("quests", parents=[common], help="list quests (the inbox)")
    listing.add_argument("--state", help="only quests in this state")
    listing.add_argument("--checkpoint", choices=["A", "B", "C"], help="only at this checkpoint")
    listing.add_argument("--severity", help="only this severity")
    listing.add_argument("--route", help="only this triage route")
    listing.add_argument("--mine", action="store_true", help="only reviews you hold")
    listing.add_argument("--unclaimed", action="store_true", help="only reviews nobody holds")
    listing.add_argument("-q", "--search", metavar="TEXT", help="title or id contains TEXT")
    listing.add_argument("--limit", type=int, default=PAGE, help=f"at most this many ({PAGE})")
    listing.add_argument("--all", action="store_true", help="every match, page after page")
    listing.set_defaults(run=run_list)

    show = commands.add_parser(
        "show", parents=[common], help="one quest: state, path, timeline, proof, effects"
    )
    show.add_argument("quest", metavar="QUEST", help="QUEST or WORKSPACE/QUEST")
    show.set_defaults(run=run_show)

    for name, text in (("claim", "hold the review"), ("release", "let go of the review"),
                       ("resume", "resume a parked quest")):  # fmt: skip
        action = _action_parser(commands, common, name, text)
        action.set_defaults(run=_simple(name))
    for name, reason in (("pause", False), ("kill", True)):
        action = _action_parser(commands, common, name, f"{name} the quest")
        action.add_argument("-m", "--reason", required=reason, default="", help="why")
        action.set_defaults(run=_with_reason(name))
    for decision in ("approve", "revise", "reject"):
        action = _action_parser(commands, common, decision, f"{decision} at a checkpoint")
        action.add_argument(
            "--checkpoint",
            choices=["A", "B", "C"],
            help="the checkpoint decided (default: the one the quest stands at)",
        )
        action.add_argument("-m", "--message", default="", help="your comment")
        action.set_defaults(run=_decide(decision))
    comment = _action_parser(commands, common, "comment", "add a comment")
    comment.add_argument("-m", "--message", required=True, help="the comment")
    comment.set_defaults(run=run_comment)


def _action_parser(commands, common, name: str, text: str):
    action = commands.add_parser(name, parents=[common], help=text)
    action.add_argument("quest", metavar="QUEST", help="QUEST or WORKSPACE/QUEST")
    action.add_argument(
        "--head", help="act only if the quest is still at this journal head (default: as read now)"
    )
    action.add_argument("--key", default="", help="Idempotency-Key: the same key applies once")
    return action


def run_list(ctx: Context) -> int:
    args = ctx.args
    workspace = ctx.config.workspace
    path = f"workspaces/{workspace}/quests" if workspace else "quests"
    query = {
        "state": args.state,
        "checkpoint": args.checkpoint,
        "severity": args.severity,
        "route": args.route,
        "mine": 1 if args.mine else None,
        "unclaimed": 1 if args.unclaimed else None,
        "q": args.search,
    }
    results, page, cursor = [], {}, None
    while True:
        page = ctx.client().get(path, **query, cursor=cursor, limit=min(args.limit, 200))
        results.extend(page.get("results", []))
        cursor = page.get("next")
        if not cursor or (not args.all and len(results) >= args.limit):
            break
    if not args.all:
        results = results[: args.limit]
    if ctx.out.as_json:
        ctx.out.json({**page, "results": results})
        return 0
    ctx.out.table(
        ["QUEST", "STATE", "CP", "SEVERITY", "CLAIMED BY", "SIGNALS", "TITLE"],
        [
            [
                _ref(q, workspace),
                q.get("state"),
                q.get("checkpoint") or "",
                q.get("severity"),
                q.get("claimed_by") or "",
                q.get("signals"),
                q.get("title"),
            ]
            for q in results
        ],
        styles={1: state_style},
        empty="No quests match.",
    )
    count = page.get("count")
    if count is not None and count > len(results):
        more = "+" if page.get("count_capped") else ""
        ctx.out.note(f"{len(results)} of {count}{more} shown; --all for every one")
    return 0


def _ref(quest: dict, workspace: str) -> str:
    return quest.get("id") if workspace else f"{quest.get('workspace')}/{quest.get('id')}"


def read_quest(ctx: Context, ref: str) -> tuple[str, str, dict[str, Any]]:
    workspace, quest_id = ctx.quest_ref(ref)
    return workspace, quest_id, ctx.client().get(f"workspaces/{workspace}/quests/{quest_id}")


def run_show(ctx: Context) -> int:
    workspace, quest_id, quest = read_quest(ctx, ctx.args.quest)
    if ctx.out.as_json:
        ctx.out.json(quest)
        return 0
    out = ctx.out
    out.line(out.paint(f"{workspace}/{quest_id}", "bold") + f"  {quest.get('title', '')}")
    state = str(quest.get("state"))
    checkpoint = quest.get("checkpoint") or ""
    out.pairs(
        [
            ("state", out.state(state) + (f" at checkpoint {checkpoint}" if checkpoint else "")),
            ("path", path_line(ctx, quest)),
            ("severity", f"{quest.get('severity')} (risk {quest.get('risk') or '-'})"),
            ("claimed by", quest.get("claimed_by") or "nobody"),
            ("revision", quest.get("revision")),
            ("head", quest.get("head")),
            ("signals", quest.get("signals")),
            ("updated", short_time(quest.get("updated_at"))),
            ("url", quest.get("url")),
        ]
    )
    proof = quest.get("proof")
    out.line()
    if proof:
        checks = proof.get("checks") or []
        passed = [c for c in checks if isinstance(c, dict) and c.get("passed")]
        verdict = str(proof.get("verdict") or "")
        out.line(
            f"{out.paint('proof', 'bold')}: {out.paint(verdict, _verdict_style(verdict))}"
            f" ({len(passed)}/{len(checks)} checks passed) {proof.get('digest', '')}"
        )
        for check in checks:
            if isinstance(check, dict):
                mark = out.paint("ok", "green") if check.get("passed") else out.paint("FAIL", "red")
                out.line(f"  {mark}  {check.get('name')}")
    else:
        out.line(f"{out.paint('proof', 'bold')}: none yet")
    out.line()
    out.line(out.paint("timeline", "bold"))
    out.table(
        ["AT", "TYPE", "ACTOR", "OUTCOME", "SUMMARY"],
        [
            [
                short_time(t.get("at")),
                t.get("type"),
                t.get("actor") or "",
                t.get("outcome"),
                t.get("summary"),
            ]
            for t in quest.get("timeline") or []
        ],
        styles={3: lambda text: "" if text == "accepted" else "red"},
        empty="  (nothing yet)",
    )
    effects = quest.get("effects") or []
    if effects:
        out.line()
        out.line(out.paint("effects", "bold"))
        out.table(
            ["KEY", "TYPE", "STATE"],
            [[e.get("key"), e.get("type"), e.get("state")] for e in effects],
            styles={2: state_style},
        )
    return 0


def _verdict_style(verdict: str) -> str:
    return {"passed": "green", "pass": "green", "failed": "red", "fail": "red"}.get(verdict, "")


def path_line(ctx: Context, quest: dict) -> str:
    """The states the quest went through, oldest first (from its timeline), the current one
    bright; then, dimmed, the rest of the main line it has still to walk."""
    walked: list[str] = []
    for entry in reversed(quest.get("timeline") or []):  # the timeline is newest first
        state = entry.get("state")
        if state and (not walked or walked[-1] != state):
            walked.append(str(state))
    current = str(quest.get("state"))
    if not walked or walked[-1] != current:
        walked.append(current)
    names = [str(s) for s in MAIN_LINE]
    ahead = names[names.index(current) + 1 :] if current in names else []
    shown = [_label(name) for name in walked[:-1]]
    shown.append(ctx.out.paint(f"[{_label(current)}]", "bold"))
    shown.extend(ctx.out.paint(_label(name), "dim") for name in ahead)
    return " > ".join(shown)


def _label(state: str) -> str:
    return f"{state}({CHECKPOINT_AT[state]})" if state in CHECKPOINT_AT else state


def act(ctx: Context, action: str, body: dict[str, Any], *, quest: dict | None = None) -> int:
    """Send one action with the head seen; print what came of it."""
    args = ctx.args
    workspace, quest_id = ctx.quest_ref(args.quest)
    head = args.head or (quest or read_quest(ctx, args.quest)[2]).get("head")
    answer = ctx.client().post(
        f"workspaces/{workspace}/quests/{quest_id}/{action}", {"head": head, **body}, key=args.key
    )
    if ctx.out.as_json:
        ctx.out.json(answer)
        return 0
    now = answer.get("quest") or {}
    if answer.get("status") == "queued":
        ctx.out.line(f"{action}: queued for the worker ({workspace}/{quest_id})")
    else:
        where = f" at checkpoint {now['checkpoint']}" if now.get("checkpoint") else ""
        state = ctx.out.state(str(now.get("state")))
        ctx.out.line(f"{action}: applied; {workspace}/{quest_id} is now {state}{where}")
    return 0


def _simple(action: str):
    return lambda ctx: act(ctx, action, {})


def _with_reason(action: str):
    return lambda ctx: act(ctx, action, {"reason": ctx.args.reason})


def _decide(decision: str):
    def run(ctx: Context) -> int:
        checkpoint = ctx.args.checkpoint
        quest = None
        if not checkpoint:
            quest = read_quest(ctx, ctx.args.quest)[2]
            checkpoint = quest.get("checkpoint") or ""
            if not checkpoint:
                raise UsageError(
                    f"{ctx.args.quest} stands at no checkpoint (it is {quest.get('state')}); "
                    "pass --checkpoint to decide anyway"
                )
        body = {"checkpoint": checkpoint, "decision": decision, "comment": ctx.args.message}
        return act(ctx, "decide", body, quest=quest)

    return run


def run_comment(ctx: Context) -> int:
    return act(ctx, "comment", {"body": ctx.args.message})
