"""Leaves an edit, exits 0, and reports in its structured output (claude or codex) that it
failed."""

import json
import sys
from pathlib import Path

Path("shop/cart.py").write_text(Path("shop/cart.py").read_text() + "\n# partial edit\n")
if sys.argv[2] == "claude":
    print(
        json.dumps(
            {
                "type": "result",
                "subtype": "error_during_execution",
                "is_error": True,
                "result": "Tool call failed: permission denied for Edit",
                "total_cost_usd": 0.002,
                "usage": {"input_tokens": 50, "output_tokens": 5},
            }
        )
    )
else:
    print(json.dumps({"type": "turn.started"}))
    print(json.dumps({"type": "turn.failed", "error": {"message": "stream disconnected"}}))
sys.exit(0)
