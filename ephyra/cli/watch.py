"""``ephyra watch QUEST``: follow a quest until a person is needed (a checkpoint, a parked
quest) or it ends. On a terminal one line is rewritten in place; in a pipe or a log a line is
written each time the quest moves."""

from __future__ import annotations

import json
import time

from ephyra.cli.context import Context
from ephyra.cli.http import EXIT_OK, EXIT_REFUSED
from ephyra.cli.quests import read_quest

ENDS = {"closed", "abandoned"}
WAITS = {"parked"}  # nothing moves until a person resumes it


def register(commands, common) -> None:
    watch = commands.add_parser(
        "watch",
        parents=[common],
        help="follow a quest until it reaches a checkpoint or ends",
        description="Exit 0 when the quest stands at a checkpoint, is parked or has ended; "
        "exit 1 when --timeout passes first.",
    )
    watch.add_argument("quest", metavar="QUEST", help="QUEST or WORKSPACE/QUEST")
    watch.add_argument("--interval", type=float, default=2.0, help="seconds between looks (2)")
    watch.add_argument("--timeout", type=float, default=0, help="give up after so many seconds")
    watch.set_defaults(run=run_watch)


def stop_reason(quest: dict) -> str:
    state = str(quest.get("state"))
    if quest.get("checkpoint"):
        return f"at checkpoint {quest['checkpoint']}"
    if state in WAITS:
        return "parked: waiting for a person"
    if state in ENDS:
        return "ended"
    return ""


def run_watch(ctx: Context) -> int:
    args, out = ctx.args, ctx.out
    started = time.monotonic()
    live = out.colour  # rewriting a line in place only makes sense on a terminal
    last = None
    while True:
        workspace, quest_id, quest = read_quest(ctx, args.quest)
        elapsed = time.monotonic() - started
        reason = stop_reason(quest)
        seen = (quest.get("state"), quest.get("revision"), quest.get("head"))
        if out.as_json:
            if seen != last:
                out.line(_json_line(quest, elapsed, reason))
        else:
            text = progress(ctx, f"{workspace}/{quest_id}", quest, elapsed)
            if live:
                out.out.write("\r\x1b[2K" + text + ("\n" if reason else ""))
                out.out.flush()
            elif seen != last:
                out.line(text)
        last = seen
        if reason:
            if not out.as_json:
                out.note(f"{workspace}/{quest_id}: {reason}")
            return EXIT_OK
        if args.timeout and elapsed >= args.timeout:
            if live:
                out.line()
            out.note(f"{workspace}/{quest_id}: still {quest.get('state')} after {elapsed:.0f} s")
            return EXIT_REFUSED
        time.sleep(max(0.05, args.interval))


def progress(ctx: Context, name: str, quest: dict, elapsed: float) -> str:
    state = ctx.out.state(str(quest.get("state")))
    claimed = f"  held by {quest['claimed_by']}" if quest.get("claimed_by") else ""
    return (
        f"{name}  {state}  revision {quest.get('revision')}{claimed}  "
        f"{ctx.out.paint(f'{elapsed:.0f}s', 'dim')}"
    )


def _json_line(quest: dict, elapsed: float, reason: str) -> str:
    fields = ("id", "workspace", "state", "checkpoint", "revision", "head", "claimed_by")
    line = {name: quest.get(name) for name in fields}
    return json.dumps({**line, "elapsed": round(elapsed, 1), "stopped": reason or None})
