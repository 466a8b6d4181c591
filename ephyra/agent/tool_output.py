"""What a coding agent's command printed, read by the kind of tool it is.

``agent_output(kind, text)`` reads the combined output of a run (stdout and stderr, as the
runner captured them) into an ``AgentOutput``: whether the tool said it failed, its last
message, and its usage. The contract (``contract.py``) never trusts the exit status alone, and
never the message either: the diff is judged on its own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ephyra.redaction.redact import redact

MAX_MESSAGE = 2000


@dataclass(frozen=True)
class Usage:
    """What the run cost, as the tool reported it (``reported``) and as the runner timed it."""

    tokens: int = 0
    cost_micros: int = 0
    seconds: float = 0.0
    reported: bool = False

    def to_evidence(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "cost_micros": self.cost_micros,
            "seconds": round(self.seconds, 3),
            "reported": self.reported,
        }


@dataclass(frozen=True)
class AgentOutput:
    """What the tool's output says. ``failed``: it said it failed (``error`` says how);
    ``structured``: it printed the structured result its kind promises."""

    structured: bool
    failed: bool
    error: str
    message: str
    usage: Usage


_AIDER_USAGE = re.compile(
    r"Tokens: (?P<sent>[\d.]+)(?P<sk>k?) sent, (?P<received>[\d.]+)(?P<rk>k?) received\."
    r"(?: Cost: \$(?P<message>[\d.]+) message, \$(?P<session>[\d.]+) session\.)?"
)


def agent_output(kind: str, text: str) -> AgentOutput:
    """Read what a tool printed (stdout and stderr together):

    - ``claude`` (``claude -p --output-format json``): the last JSON object whose ``type`` is
      ``result``: ``is_error`` or a ``subtype`` starting with ``error`` is a failure;
      ``result`` its message, ``total_cost_usd`` and ``usage`` (input, output and cache
      tokens) its usage. No such object is a failure;
    - ``codex`` (``codex exec --json``): one JSON event a line; ``turn.failed`` or ``error``
      is a failure, the last ``agent_message`` item its message, the ``usage`` of each
      ``turn.completed`` its tokens (Codex reports no cost). No completed turn is a failure;
    - ``aider``: its ``Tokens: … sent, … received. Cost: $… message, $… session.`` lines;
    - ``plain``: nothing; the exit status and the diff say it all."""
    if kind == "claude":
        return _claude(text)
    if kind == "codex":
        return _codex(text)
    if kind == "aider":
        return _aider(text)
    return AgentOutput(False, False, "", "", Usage())


def _json_lines(text: str) -> list[dict[str, Any]]:
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return found


def _said(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return redact(text.strip())[:MAX_MESSAGE]


def _number(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _claude(text: str) -> AgentOutput:
    results = [e for e in _json_lines(text) if e.get("type") == "result"]
    if not results:
        return AgentOutput(False, True, "it printed no JSON result", "", Usage())
    result = results[-1]
    subtype = str(result.get("subtype", ""))
    failed = result.get("is_error") is True or subtype.startswith("error")
    usage = result.get("usage") if isinstance(result.get("usage"), dict) else {}
    tokens = sum(
        _number(usage.get(k))
        for k in (
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        )
    )
    cost = result.get("total_cost_usd", result.get("cost_usd"))
    cost_micros = round(cost * 1_000_000) if isinstance(cost, int | float) and cost > 0 else 0
    message = _said(result.get("result", ""))
    error = (message or subtype or "is_error") if failed else ""
    return AgentOutput(True, failed, error, message, Usage(tokens, cost_micros, reported=True))


def _codex(text: str) -> AgentOutput:
    events = _json_lines(text)
    tokens, completed, errors, message = 0, False, [], ""
    for event in events:
        kind = event.get("type")
        if kind == "turn.completed":
            completed = True
            usage = event.get("usage") if isinstance(event.get("usage"), dict) else {}
            tokens += _number(usage.get("input_tokens")) + _number(usage.get("output_tokens"))
        elif kind == "turn.failed":
            error = event.get("error")
            errors.append(_said(error.get("message") if isinstance(error, dict) else error))
        elif kind == "error":
            errors.append(_said(event.get("message", "error")))
        elif kind == "item.completed":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "agent_message":
                message = _said(item.get("text", ""))
    if not events:
        return AgentOutput(False, True, "it printed no JSON events", "", Usage())
    failed = bool(errors) or not completed
    error = "; ".join(errors) if errors else ("no turn completed" if failed else "")
    return AgentOutput(True, failed, error[:MAX_MESSAGE], message, Usage(tokens, reported=True))


def _aider(text: str) -> AgentOutput:
    tokens, cost, reported = 0, 0, False
    for found in _AIDER_USAGE.finditer(text):
        reported = True
        tokens += _kilo(found["sent"], found["sk"]) + _kilo(found["received"], found["rk"])
        if found["session"]:
            cost = round(float(found["session"]) * 1_000_000)
    return AgentOutput(reported, False, "", "", Usage(tokens, cost, reported=reported))


def _kilo(number: str, k: str) -> int:
    return round(float(number) * (1000 if k else 1))
