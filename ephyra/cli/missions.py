"""Missions and their work packages: the list, one mission (board, moves offered, attempt
ledger, history), and the moves, each decided by the machine on the server.

Every move reads the mission first (or takes ``--head``) and sends the journal head it saw, so
a move on a mission that moved in between is refused instead of applied blind."""

from __future__ import annotations

from pathlib import Path
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
    evidence_options(move)
    move.add_argument("-m", "--note", default="", help="a note for the attempt ledger")
    move.add_argument("--head", help="act only if the mission is still at this journal head")
    move.add_argument("--key", default="", help="Idempotency-Key: the same key applies once")
    move.set_defaults(run=run_move)

    supersede = subs.add_parser(
        "supersede", parents=[common], help="replace a FAILED work package by a new one"
    )
    supersede.add_argument("mission", metavar="MID")
    supersede.add_argument("wp", metavar="WP", help="the failed work package")
    supersede.add_argument("title", metavar="TITLE", help="the new work package's title")
    supersede.add_argument("--role", required=True, choices=ROLES, help="the role you act in")
    evidence_options(supersede)
    supersede.add_argument("--head", help="act only if the mission is still at this journal head")
    supersede.add_argument("--key", default="", help="Idempotency-Key: the same key applies once")
    supersede.set_defaults(run=run_supersede)

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


def evidence_options(parser) -> None:
    """The one evidence item a move gives, in one of its kinds (docs/missions.md)."""
    given = parser.add_mutually_exclusive_group()
    given.add_argument(
        "-e",
        "--evidence",
        metavar="[NAME=]TEXT",
        help="the evidence the move requires, as text (NAME is the move's evidence name)",
    )
    given.add_argument("--link", metavar="URL", help="the evidence as an http(s) link")
    given.add_argument("--file", metavar="PATH", help="the evidence as a file (uploaded)")
    given.add_argument(
        "--proof", action="store_true", help="the evidence: the carrying quest's proof bundle"
    )
    given.add_argument(
        "--quest-state", action="store_true", help="the evidence: the carrying quest as it is"
    )


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
        ["MISSION", "STATE", "WORK PACKAGES", "TITLE"],
        [[m.get("id"), m.get("state"), _counts(m), m.get("title")] for m in rows],
        styles={1: state_style},
        empty="No missions yet: `ephyra missions create TITLE` makes one.",
    )
    return 0


def _counts(mission: dict) -> str:
    counts = mission.get("wp_counts") or {}
    return ", ".join(f"{n} {state}" for state, n in counts.items() if n) or "-"


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
            ("head", mission.get("head")),
            ("your roles", mission.get("roles") or "none"),
            ("people", _people(mission.get("people") or {})),
            ("supersedes", mission.get("supersedes") or "-"),
            ("superseded by", mission.get("superseded_by") or "-"),
        ]
    )
    wps = _wps(mission)
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
                ", ".join(w.get("makers") or []),
                w.get("checker") or "",
                w.get("title"),
            ]
            for w in wps
        ],
        styles={1: state_style},
        empty="  (none yet: `ephyra missions add-wp`)",
    )
    offers = list(mission.get("offers") or [])
    for wp in wps:
        offers.extend(wp.get("offers") or [])
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
    ledger = mission.get("ledger") or []
    if ledger:
        out.line()
        out.line(out.paint("attempt ledger", "bold"))
        out.table(
            ["#", "SUBJECT", "FROM", "TO", "ACTOR", "ROLE", "REASON"],
            [
                [
                    a.get("sequence"),
                    a.get("subject"),
                    a.get("from"),
                    a.get("to"),
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
                [short_time(h.get("at")), h.get("actor"), h.get("role") or "", _what(h)]
                for h in history
            ],
        )
    return 0


def _people(people: dict) -> str:
    parts = []
    for role, names in people.items():
        shown = ", ".join(str(n) for n in names) if isinstance(names, list) else str(names)
        if shown:
            parts.append(f"{role}: {shown}")
    return "; ".join(parts) or "-"


def _what(entry: dict) -> str:
    subject, kind = entry.get("subject") or "", entry.get("kind") or ""
    before, after = entry.get("before") or "", entry.get("after") or ""
    move = f" {before} > {after}" if before or after else ""
    return f"{kind} {subject}{move}".strip()


def _quest_of(wp: dict) -> str:
    quest = wp.get("quest")
    return str(quest.get("id") or "") if isinstance(quest, dict) else ""


def _quest_state(wp: dict) -> str:
    quest = wp.get("quest")
    if not isinstance(quest, dict):
        return ""
    if not quest.get("found", True) or not quest.get("state"):
        return "queued for the worker"
    where = f" at {quest['checkpoint']}" if quest.get("checkpoint") else ""
    return f"{quest.get('state')}{where}"


def _done(ctx: Context, answer: dict, text: str) -> int:
    if ctx.out.as_json:
        ctx.out.json(answer)
    elif answer.get("status") == "duplicate":
        ctx.out.line(f"{text} (already done with this key: nothing new)")
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
    mission = ctx.client().get(_base(ctx, mission_id))
    return str(getattr(ctx.args, "head", None) or mission.get("head") or ""), mission


def run_add_wp(ctx: Context) -> int:
    args = ctx.args
    before = {w.get("id") for w in _wps(ctx.client().get(_base(ctx, args.mission)))}
    answer = ctx.client().post(
        f"{_base(ctx, args.mission)}/wps", {"title": args.title}, key=args.key
    )
    added = [w.get("id") for w in _wps(_mission_of(answer)) if w.get("id") not in before]
    name = added[0] if added else "?"
    return _done(ctx, answer, f"{args.mission}: work package {name} is added.")


def evidence_of(ctx: Context, mission_id: str) -> dict[str, Any]:
    """The one evidence item of a move, as the API takes it."""
    args = ctx.args
    if args.link:
        return {"kind": "link", "link": args.link}
    if args.proof:
        return {"kind": "proof"}
    if args.quest_state:
        return {"kind": "quest"}
    if args.file:
        uploaded = upload(ctx, mission_id, Path(args.file))
        return {"kind": "file", "sha256": uploaded["sha256"], "name": uploaded["name"]}
    if args.evidence is None:
        raise UsageError(
            "a move needs its evidence: --evidence TEXT, --link, --file, --proof or --quest-state"
            " (`ephyra missions show` names what each move requires)"
        )
    name, sep, text = args.evidence.partition("=")
    if sep and name.strip() and " " not in name.strip():
        return {name.strip(): text}
    return {"kind": "text", "text": args.evidence}


def upload(ctx: Context, mission_id: str, path: Path) -> dict[str, Any]:
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    return ctx.client().upload(f"{_base(ctx, mission_id)}/evidence", "file", path.name, content)


def run_move(ctx: Context) -> int:
    args = ctx.args
    head, _ = _head(ctx, args.mission)
    body = {
        "to": args.to,
        "role": args.role,
        "evidence": evidence_of(ctx, args.mission),
        "note": args.note,
        "head": head,
    }
    path = _base(ctx, args.mission)
    path = f"{path}/wps/{args.wp}/transition" if args.wp else f"{path}/transition"
    answer = ctx.client().post(path, body, key=args.key)
    now = _mission_of(answer)
    subject, state = args.wp or args.mission, now.get("state")
    if args.wp:
        state = next((w.get("state") for w in _wps(now) if w.get("id") == args.wp), args.to)
    return _done(ctx, answer, f"{args.mission}: {subject} is now {ctx.out.state(str(state))}")


def run_supersede(ctx: Context) -> int:
    args = ctx.args
    head, before = _head(ctx, args.mission)
    known = {w.get("id") for w in _wps(before)}
    body = {
        "title": args.title,
        "role": args.role,
        "evidence": evidence_of(ctx, args.mission),
        "head": head,
    }
    answer = ctx.client().post(
        f"{_base(ctx, args.mission)}/wps/{args.wp}/supersede", body, key=args.key
    )
    added = [w.get("id") for w in _wps(_mission_of(answer)) if w.get("id") not in known]
    new = added[0] if added else "?"
    return _done(ctx, answer, f"{args.mission}: {new} supersedes the failed {args.wp}.")


def run_link(ctx: Context) -> int:
    args = ctx.args
    head, _ = _head(ctx, args.mission)
    answer = ctx.client().post(
        f"{_base(ctx, args.mission)}/wps/{args.wp}/quest",
        {"quest": args.quest, "head": head},
        key=args.key,
    )
    wp = next((w for w in _wps(_mission_of(answer)) if w.get("id") == args.wp), {})
    quest = _quest_of(wp) or args.quest or "a new quest"
    return _done(ctx, answer, f"{args.mission}: {args.wp} is carried by quest {quest}.")
