"""Follows the contract: reads the prompt file, fixes shop/cart.py, prints its result in the
output format named by its second argument (claude, codex, aider or plain)."""

import json
import sys
from pathlib import Path

prompt = Path(sys.argv[1]).read_text()
kind = sys.argv[2] if len(sys.argv) > 2 else "plain"
assert prompt.startswith("# Task"), "the prompt file is not the prompt"

cart = Path("shop/cart.py")
cart.write_text(
    cart.read_text().replace("return sum(prices) / len(prices) * len(prices)", "return sum(prices)")
)
said = "Fixed total() for an empty cart."
if kind == "claude":
    print("starting", file=sys.stderr)
    print(
        json.dumps(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "duration_ms": 1200,
                "num_turns": 3,
                "result": said,
                "session_id": "s-1",
                "total_cost_usd": 0.0123,
                "usage": {
                    "input_tokens": 1000,
                    "output_tokens": 200,
                    "cache_creation_input_tokens": 30,
                    "cache_read_input_tokens": 70,
                },
            }
        )
    )
elif kind == "codex":
    for event in (
        {"type": "thread.started", "thread_id": "t-1"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "i-1", "type": "agent_message", "text": said}},
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 900, "cached_input_tokens": 100, "output_tokens": 150},
        },
    ):
        print(json.dumps(event))
elif kind == "aider":
    print("Applied edit to shop/cart.py")
    print("Tokens: 2.5k sent, 310 received. Cost: $0.01 message, $0.02 session.")
else:
    print(said)
