"""Says it is done and changes nothing."""

import json

print(
    json.dumps(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": "All fixed!",
            "usage": {"input_tokens": 5, "output_tokens": 2},
        }
    )
)
