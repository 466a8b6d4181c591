"""Writes far more than any patch needs."""

from pathlib import Path

Path("shop/generated.py").write_text("".join(f"VALUE_{n} = {n}\n" for n in range(500)))
