"""The sixteen quest states and the groups the machine reasons about."""

from enum import StrEnum


class State(StrEnum):
    SENSED = "sensed"
    TRIAGED = "triaged"
    RESEARCHING = "researching"
    HYPOTHESISED = "hypothesised"
    REPRODUCING = "reproducing"
    PLANNED = "planned"
    PATCHING = "patching"
    PROVING = "proving"
    READY = "ready"
    LANDING = "landing"
    WATCHING = "watching"
    CLOSED = "closed"
    ROLLED_BACK = "rolled_back"
    PARKED = "parked"
    HANDED_OFF = "handed_off"
    ABANDONED = "abandoned"


class Checkpoint(StrEnum):
    A = "A"
    B = "B"
    C = "C"


class Severity(StrEnum):
    """Sentry's levels, in rising order; a quest's severity is the highest it has seen."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    FATAL = "fatal"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {s: i for i, s in enumerate(Severity)}


def higher_severity(a: Severity, b: Severity) -> Severity:
    return a if _SEVERITY_RANK[a] >= _SEVERITY_RANK[b] else b


TERMINAL = frozenset({State.CLOSED, State.ABANDONED})

# The states a quest walks through when nothing goes wrong, in order (pages and the command
# line draw where a quest stands on it).
MAIN_LINE = (
    State.SENSED,
    State.TRIAGED,
    State.RESEARCHING,
    State.HYPOTHESISED,
    State.REPRODUCING,
    State.PLANNED,
    State.PATCHING,
    State.PROVING,
    State.READY,
    State.LANDING,
    State.WATCHING,
    State.CLOSED,
)
ACTIVE = frozenset(State) - TERMINAL

CHECKPOINT_STATE = {
    Checkpoint.A: State.HYPOTHESISED,
    Checkpoint.B: State.PLANNED,
    Checkpoint.C: State.READY,
}
STATE_CHECKPOINT = {state: cp for cp, state in CHECKPOINT_STATE.items()}
CHECKPOINT_STATES = frozenset(CHECKPOINT_STATE.values())

# States in which an agent step may be running, so leaving them asks for stop_agent.
AGENT_STATES = frozenset({State.RESEARCHING, State.REPRODUCING, State.PATCHING})

# Where "revise" at a checkpoint sends the quest back to, and the agent step it restarts.
REVISE_TARGET = {
    Checkpoint.A: (State.RESEARCHING, "research"),
    Checkpoint.B: (State.REPRODUCING, "plan"),
    Checkpoint.C: (State.PATCHING, "patch"),
}
