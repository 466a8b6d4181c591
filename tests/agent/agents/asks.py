"""Edits, then asks for confirmation on its standard input, which is closed."""

from pathlib import Path

Path("shop/cart.py").write_text("# edited before asking\n")
answer = input("Apply these changes? [y/N] ")
print("answer:", answer)
