"""Following the demo's quest: what it is doing, said as it happens, and what the demo does in
its turn (approve a checkpoint when asked to, deploy what landed).

The quest is read from its projection and its ledger rows, as the dashboard reads them; a
checkpoint is approved through the action layer (``quests.actions``), as the button on the
quest's page does, so the approval is the person's, in the audit trail like any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ledger.models import Operation
from quests import actions
from quests.actions import Seen
from quests.models import Quest, Workspace
from quests.workspaces import workspace_journal

CHECKPOINTS = {"hypothesised": "A", "planned": "B", "ready": "C"}
SAYS = {
    "sensed": "a signal opened the quest",
    "triaged": "triage routed it to be fixed",
    "researching": "researching: reading the traceback, the files and their history",
    "hypothesised": "a hypothesis is written (checkpoint A)",
    "reproducing": "reproducing the failure with the suite, then locating the culprit",
    "planned": "reproduced; the plan is written (checkpoint B)",
    "patching": "patching: reverting the culprit on the quest's branch",
    "proving": "proving the patch: the proof matrix's checks at the patch head",
    "ready": "proven (checkpoint C)",
    "landing": "landing on the remote's base branch (compare-and-swap push)",
    "watching": "landed; production is watched",
    "closed": "closed: production stayed clean through the watch",
    "rolled_back": "a regression was seen: rolling the landed commit back",
    "parked": "parked",
    "handed_off": "a person holds the review",
    "abandoned": "abandoned",
}
# What the quest's projection holds worth a line when it reaches a state.
DETAILS = {
    "hypothesised": ("hypothesis",),
    "planned": ("plan",),
    "ready": ("proof_digest",),
    "watching": ("landed_commit",),
}
# What the event that brought the quest to a state says, worth a line: (event type, field).
TOLD = {
    "closed": ("watch_clean", "summary"),
    "rolled_back": ("regression_observed", "summary"),
    "researching": ("rollback_confirmed", "commit"),
}
STUCK_SECONDS = 20  # an operation pending this long gets a word on why


class DemoFailed(Exception):
    """The quest ended somewhere the scenario does not lead."""


@dataclass
class Follower:
    workspace: Workspace
    say: Callable[[str], None]
    approver: object | None  # the account approving checkpoints, None: a person in the browser
    quest_url: Callable[[Quest], str]
    deploy: Callable[[Quest], None]  # when the landed commit is to be deployed
    seen_state: tuple[str, int] | None = None
    seen_head: str | None = None  # the journal commit the last look ended at
    ops: dict[int, str] = field(default_factory=dict)
    asked: set[tuple[str, int, str]] = field(default_factory=set)
    waiting: set[tuple[str, int]] = field(default_factory=set)
    deployed: set[int] = field(default_factory=set)
    stuck: set[int] = field(default_factory=set)
    other_quests: set[int] = field(default_factory=set)

    def quest(self, timeout: float) -> Quest:
        """Wait for the first quest of the workspace (the one production's error opens)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            quest = Quest.objects.filter(workspace=self.workspace).order_by("created_at").first()
            if quest is not None:
                return quest
            time.sleep(0.2)
        raise DemoFailed(
            f"no quest opened within {timeout:.0f} s: is the worker running (make run)?"
        )

    def until(self, done: Callable[[Quest], bool], timeout: float) -> Quest:
        """Follow the quest until ``done`` holds; say each step."""
        deadline = time.monotonic() + timeout
        quest = self.quest(timeout)
        while time.monotonic() < deadline:
            quest = Quest.objects.get(pk=quest.pk)
            self.step(quest)
            self.others(quest)
            if done(quest):
                return quest
            if quest.state in {"abandoned", "parked"}:
                why = f" ({quest.park_reason})" if quest.park_reason else ""
                raise DemoFailed(f"the quest is {quest.state}{why}: see {self.quest_url(quest)}")
            time.sleep(0.25)
        raise DemoFailed(
            f"the quest is still {quest.state} after {timeout:.0f} s: see {self.quest_url(quest)}"
        )

    def step(self, quest: Quest) -> None:
        now = (quest.state, quest.revision)
        if now != self.seen_state:
            self.passed_through(quest)
            self.seen_state = now
            said = SAYS.get(quest.state, quest.state)
            self.say(f"quest {quest.quest_id} r{quest.revision}: {said}")
            told = TOLD.get(quest.state)
            if told:
                self.tell(quest, *told)
            for name in DETAILS.get(quest.state, ()):
                text = str(quest.data.get(name) or "").strip()
                if text:
                    self.say(f"  {name}: {text.splitlines()[0][:160]}")
        self.operations(quest)
        checkpoint = CHECKPOINTS.get(quest.state)
        if checkpoint and (checkpoint, quest.revision, quest.journal_head) not in self.asked:
            # Asked again when the journal moved while the quest waits (a repeat of the signal
            # merged): an approval of what the person saw before is refused as stale.
            self.asked.add((checkpoint, quest.revision, quest.journal_head))
            self.decide(quest, checkpoint)
        landed = quest.data.get("landed_commit")
        if quest.state == "watching" and landed and quest.revision not in self.deployed:
            self.deployed.add(quest.revision)
            self.deploy(quest)

    def passed_through(self, quest: Quest) -> None:
        """Say the states the quest went through between two looks (a rollback passes
        ``rolled_back`` in a moment), read from its journal: the last one is said by ``step``."""
        entries = workspace_journal(self.workspace).history(quest.quest_id)
        oids = [str(entry.oid) for entry in entries]
        if self.seen_head is not None:
            start = oids.index(self.seen_head) + 1 if self.seen_head in oids else 0
            for entry in entries[start:-1]:
                state, revision = str(entry.quest.state), entry.quest.revision
                if (state, revision) != self.seen_state:
                    self.say(f"quest {quest.quest_id} r{revision}: {SAYS.get(state, state)}")
                    self.seen_state = (state, revision)
                    if told := TOLD.get(state):
                        self.tell(quest, *told)
        if oids:
            self.seen_head = oids[-1]

    def others(self, followed: Quest) -> None:
        """Say when production's errors open another quest (the rollback scenario's new error
        does): it waits in the inbox, and the demo does not follow it."""
        for other in Quest.objects.filter(workspace=self.workspace).exclude(pk=followed.pk):
            if other.pk not in self.other_quests:
                self.other_quests.add(other.pk)
                self.say(f"another quest opened: {other.title[:100]} ({self.quest_url(other)})")

    def tell(self, quest: Quest, kind: str, name: str) -> None:
        """Say ``name`` of the journal's latest ``kind`` event of this revision, if any."""
        for entry in reversed(workspace_journal(self.workspace).history(quest.quest_id)):
            if entry.event.type == kind:
                value = getattr(entry.event, name, None)
                if value:
                    self.say(f"  {kind}: {value}")
                return

    def decide(self, quest: Quest, checkpoint: str) -> None:
        if self.approver is None:
            if (checkpoint, quest.revision) not in self.waiting:
                self.waiting.add((checkpoint, quest.revision))
                self.say(
                    f"checkpoint {checkpoint}: waiting for a reviewer to approve at "
                    f"{self.quest_url(quest)}"
                )
            return
        name = self.approver.get_username()
        try:
            submitted = actions.checkpoint_decide(
                self.approver,
                quest,
                checkpoint=checkpoint,
                verdict="approve",
                comment="approved by the demo (--approve-as)",
                seen=Seen(quest.journal_head, quest.revision),
                key=f"demo-{checkpoint}-r{quest.revision}-{quest.journal_head[:16]}",
            ).wait(timeout=10)
        except actions.ActionError as refused:  # the quest moved: look again
            self.say(f"checkpoint {checkpoint}: not approved yet ({refused}); looking again")
            return
        if submitted.state == "refused":
            self.say(f"checkpoint {checkpoint}: the approval was refused ({submitted.reason})")
            return
        self.say(f"checkpoint {checkpoint}: approved as {name} (the audit trail names {name})")

    def operations(self, quest: Quest) -> None:
        """Say when each of the quest's operations starts and how it ends."""
        rows = Operation.objects.filter(
            workspace=self.workspace, quest_id=quest.quest_id
        ).values_list("id", "type", "state", "started_at", "finished_at", "created_at")
        for op_id, kind, state, started, finished, created in rows:
            before = self.ops.get(op_id)
            if state == before:
                if state == "pending" and op_id not in self.stuck:
                    waited = time.time() - created.timestamp()
                    if waited > STUCK_SECONDS:
                        self.stuck.add(op_id)
                        self.say(
                            f"  {kind} has waited {waited:.0f} s for a worker: is one running, "
                            "and does an adapter serve it?"
                        )
                continue
            self.ops[op_id] = state
            if state == "started":
                self.say(f"  running {kind}")
            elif state in {"succeeded", "failed", "ambiguous", "dead"}:
                took = (
                    f" in {(finished - started).total_seconds():.1f} s"
                    if started and finished
                    else ""
                )
                self.say(f"  {kind} {state}{took}")
