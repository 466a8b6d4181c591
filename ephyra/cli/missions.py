"""Missions and their work packages: the list, one mission (board, moves offered, attempt
ledger, history), and the moves, each decided by the machine on the server.

Every move reads the mission first (or takes ``--head``) and sends the journal head it saw, so
a move on a mission that moved in between is refused instead of applied blind."""

from __future__ import annotations

from typing import Any

from ephyra.cli.context import Context, UsageError
from ephyra.cli.output import short_time, state_style

MISSION_STATES = [
    "created",
    "planning",
    "ready",
    "running",
    "review",
    "completed",
    "blocked",
    "paused",
    "failed",
    "cancelled",
    "escalated",
]
WP_STATES = [
    "todo",
    "ready",
    "in_progress",
    "checking",
    "done",
    "blocked",
    "escalated",
    "failed",
]
ROLES = ["lead", "maker", "debugger", "checker", "human", "higher"]


def register(commands, common) -> None:
    missions = commands.add_parser("missions", parents=[common], help="missions and their WPs")
    missions.add_argument("--state", choices=MISSION_STATES, help="only missions in this state")
    missions.set_defaults(run=run_list)
    subs = missions.add_subparsers(title="missions commands", metavar="COMMAND")

    show = subs.add_parser("show", parents=[common], help="one mission: WPs, moves, ledger")
    show.add_argument("mission", metavar="MID")
    show.set_defaults(run=run_show)

    create = subs.add_parser("create", parents=[common], help="a new mission; you lead it")
    create.add_argument("title", metavar="TITLE")
    create.add_argument("--key", default="", help="Idempotency-Key: the same key creates once")
    create.set_defaults(run=run_create)

    add = subs.add_parser("add-wp", parents=[common], help="add a work package")
    add.add_argument("mission", metavar="MID")
    add.add_argument("title", metavar="TITLE")
    add.add_argument("--key", default="", help="Idempotency-Key: the same key adds once")
    add.set_defaults(run=run_add_wp)

    move = subs.add_parser(
        "move", parents=[common], help="move the mission, or one WP with --wp, to a state"
    )
    move.add_argument("mission", metavar="MID")
    move.add_argument("--wp", help="move this work package instead of the mission")
    move.add_argument("--to", required=True, type=_state, help="the state to move to")
    move.add_argument("--role", required=True, choices=ROLES, help="the role you act in")
    move.add_argument(
        "-e",
        "--evidence",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="evidence the move requires (repeatable); a bare VALUE goes under the name "
        "the move requires",
    )
    move.add_argument("-m", "--note", default="", help="a note for the attempt ledger")
    move.add_argument("--head", help="act only if the mission is still at this journal head")
    move.add_argument("--key", default="", help="Idempotency-Key: the same key applies once")
    move.set_defaults(run=run_move)

    link = subs.add_parser("link", parents=[common], help="link a WP to the quest carrying it")
    link.add_argument("mission", metavar="MID")
    link.add_argument("wp", metavar="WP")
    link.add_argument(
        "quest",
        metavar="QUEST",
        nargs="?",
        default="",
        help="an existing quest's id (none: open a new quest for the WP)",
    )
    link.add_argument("--head", help="act only if the mission is still at this journal head")
    link.add_argument("--key", default="", help="Idempotency-Key: the same key links once")
    link.set_defaults(run=run_link)


def _state(text: str) -> str:
    """``IN_PROGRESS``, ``in-progress`` and ``"in progress"`` all name ``in_progress``."""
    return text.strip().lower().replace("-", "_").replace(" ", "_")


def _base(ctx: Context, mission: str = "") -> str:
    path = f"workspaces/{ctx.workspace()}/missions"
    return f"{path}/{mission}" if mission else path


def _wps(mission: dict) -> list[dict]:
    return mission.get("work_packages") or mission.get("wps") or []


def run_list(ctx: Context) -> int:
    answer = ctx.client().get(_base(ctx), state=ctx.args.state)
    rows = answer.get("results", []) if isinstance(answer, dict) else answer
    if ctx.out.as_json:
        ctx.out.json(answer)
        return 0
    ctx.out.table(
        ["MISSION", "STATE", "WPS", "ATTEMPTS", "TITLE"],
        [
            [m.get("id"), m.get("state"), _counts(m), m.get("attempts"), m.get("title")]
            for m in rows
        ],
        styles={1: state_style},
        empty="No missions yet: `ephyra missions create TITLE` makes one.",
    )
    return 0


def _counts(mission: dict) -> str:
    counts = mission.get("wp_counts") or {}
    if isinstance(counts, list):  # [[state, n], ...] or [{"state", "count"}, ...]
        counts = dict(
            (c.get("state"), c.get("count")) if isinstance(c, dict) else (c[0], c[-1])
            for c in counts
        )
    shown = [f"{n} {s}" for s, n in counts.items() if n]
    return ", ".join(shown) or "-"


def run_show(ctx: Context) -> int:
    mission = ctx.client().get(_base(ctx, ctx.args.mission))
    if ctx.out.as_json:
        ctx.out.json(mission)
        return 0
    out = ctx.out
    out.line(out.paint(str(mission.get("id")), "bold") + f"  {mission.get('title', '')}")
    out.pairs(
        [
            ("state", out.state(str(mission.get("state")))),
            ("revision", mission.get("revision")),
            ("head", mission.get("head")),
            ("your roles", mission.get("roles") or mission.get("my_roles") or []),
            ("supersedes", mission.get("supersedes") or "-"),
        ]
    )
    out.line()
    out.line(out.paint("work packages", "bold"))
    out.table(
        ["WP", "STATE", "QUEST", "QUEST STATE", "MAKERS", "CHECKER", "TITLE"],
        [
            [
                w.get("id"),
                w.get("state"),
                _quest_of(w),
                _quest_state(w),
                w.get("makers") or [],
                w.get("checker") or "",
                w.get("title"),
            ]
            for w in _wps(mission)
        ],
        styles={1: state_style},
        empty="  (none yet: `ephyra missions add-wp`)",
    )
    offers = mission.get("offers") or []
    out.line()
    out.line(out.paint("moves you may make", "bold"))
    out.table(
        ["SUBJECT", "TO", "ROLES", "EVIDENCE"],
        [
            [
                o.get("subject"),
                o.get("to") or o.get("kind"),
                o.get("roles") or [],
                o.get("evidence"),
            ]
            for o in offers
        ],
        empty="  (none now)",
    )
    ledger = mission.get("attempts") if isinstance(mission.get("attempts"), list) else None
    ledger = ledger if ledger is not None else mission.get("attempt_ledger") or []
    if ledger:
        out.line()
        out.line(out.paint("attempt ledger", "bold"))
        out.table(
            ["#", "SUBJECT", "FROM", "TO", "ACTOR", "ROLE", "REASON"],
            [
                [
                    a.get("sequence"),
                    a.get("subject"),
                    a.get("from_state"),
                    a.get("to_state"),
                    a.get("actor"),
                    a.get("role"),
                    a.get("reason"),
                ]
                for a in ledger
            ],
        )
    history = mission.get("history") or []
    if history:
        out.line()
        out.line(out.paint("history", "bold"))
        out.table(
            ["AT", "WHO", "ROLE", "WHAT"],
            [
                [
                    short_time(h.get("at")),
                    h.get("actor"),
                    h.get("role") or "",
                    h.get("summary") or h.get("message") or h.get("kind"),
                ]
                for h in history
            ],
        )
    return 0


def _quest_of(wp: dict) -> str:
    quest = wp.get("quest")
    if isinstance(quest, dict):
        return str(quest.get("id") or "")
    return str(quest or "")


def _quest_state(wp: dict) -> str:
    quest = wp.get("quest")
    if isinstance(quest, dict):
        where = f" ({quest['checkpoint']})" if quest.get("checkpoint") else ""
        return f"{quest.get('state') or 'queued'}{where}"
    return str(wp.get("quest_state") or "")


def _done(ctx: Context, answer: dict, text: str) -> int:
    if ctx.out.as_json:
        ctx.out.json(answer)
    else:
        ctx.out.line(text)
    return 0


def _mission_of(answer: dict) -> dict:
    return answer.get("mission") if isinstance(answer.get("mission"), dict) else answer


def run_create(ctx: Context) -> int:
    answer = ctx.client().post(_base(ctx), {"title": ctx.args.title}, key=ctx.args.key)
    mission = _mission_of(answer)
    return _done(ctx, answer, f"Mission {mission.get('id')} is created; you are its lead.")


def _head(ctx: Context, mission_id: str) -> tuple[str, dict]:
    if ctx.args.head:
        return ctx.args.head, {}
    mission = ctx.client().get(_base(ctx, mission_id))
    return str(mission.get("head") or ""), mission


def run_add_wp(ctx: Context) -> int:
    args = ctx.args
    head, _ = _head(ctx, args.mission) if hasattr(args, "head") else ("", {})
    answer = ctx.client().post(
        f"{_base(ctx, args.mission)}/wps", {"title": args.title, "head": head}, key=args.key
    )
    mission = _mission_of(answer)
    new = answer.get("wp") or (_wps(mission)[-1].get("id") if _wps(mission) else "")
    return _done(ctx, answer, f"{args.mission}: work package {new} is added.")


def evidence_of(items: list[str], required: str) -> dict[str, Any]:
    evidence: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or " " in name.strip():
            if not required:
                raise UsageError(
                    f"--evidence {item!r}: write NAME=VALUE (no required name is known)"
                )
            name, value = required, item
        evidence[name.strip()] = value
    return evidence


def run_move(ctx: Context) -> int:
    args = ctx.args
    head, mission = _head(ctx, args.mission)
    required = _required_evidence(mission, args.wp or args.mission, args.to)
    body = {
        "to": args.to,
        "role": args.role,
        "evidence": evidence_of(args.evidence, required),
        "note": args.note,
        "head": head,
    }
    path = _base(ctx, args.mission)
    path = f"{path}/wps/{args.wp}/transition" if args.wp else f"{path}/transition"
    answer = ctx.client().post(path, body, key=args.key)
    now = _mission_of(answer)
    subject = args.wp or args.mission
    state = args.to
    if args.wp:
        state = next((w.get("state") for w in _wps(now) if w.get("id") == args.wp), state)
    else:
        state = now.get("state") or state
    return _done(ctx, answer, f"{args.mission}: {subject} is now {ctx.out.state(str(state))}")


def _required_evidence(mission: dict, subject: str, to: str) -> str:
    """The evidence name the move requires, from the moves the server offers this person."""
    for offer in mission.get("offers") or []:
        if offer.get("subject") == subject and offer.get("to") == to:
            return str(offer.get("evidence") or "")
    return ""


def run_link(ctx: Context) -> int:
    args = ctx.args
    head, _ = _head(ctx, args.mission)
    answer = ctx.client().post(
        f"{_base(ctx, args.mission)}/wps/{args.wp}/quest",
        {"quest": args.quest, "head": head},
        key=args.key,
    )
    quest = answer.get("quest") or args.quest or "a new quest"
    if isinstance(quest, dict):
        quest = quest.get("id")
    return _done(ctx, answer, f"{args.mission}: {args.wp} is carried by quest {quest}.")
