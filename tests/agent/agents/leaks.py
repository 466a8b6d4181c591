"""Fixes the code but prints its API key, the variables it sees, and a token in its result."""

import json
import os
import sys
from pathlib import Path

token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
cart = Path("shop/cart.py")
cart.write_text(
    cart.read_text().replace("return sum(prices) / len(prices) * len(prices)", "return sum(prices)")
)
print("my key is", os.environ.get("ANTHROPIC_API_KEY"))
print("I see:", " ".join(sorted(os.environ)), file=sys.stderr)
print(
    json.dumps(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": f"Done. Pushed with {token}; key {os.environ.get('ANTHROPIC_API_KEY')}",
            "total_cost_usd": 0.5,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )
)
