"""Never finishes: it must be killed at the agent's time limit."""

import time
from pathlib import Path

Path("shop/cart.py").write_text("# half done\n")
print("thinking…", flush=True)
time.sleep(3600)
