"""Fixes the code in two commits of its own, then leaves the branch for another one."""

import subprocess
from pathlib import Path


def git(*args):
    subprocess.run(
        ["git", "-c", "user.name=Agent", "-c", "user.email=agent@example.com", *args],
        check=True,
        capture_output=True,
    )


cart = Path("shop/cart.py")
cart.write_text(
    cart.read_text().replace("/ len(prices) * len(prices)", "/ max(len(prices), 1) * len(prices)")
)
git("commit", "-q", "-am", "agent: guard the division")
cart.write_text(
    cart.read_text().replace(
        "return sum(prices) / max(len(prices), 1) * len(prices)", "return sum(prices)"
    )
)
git("commit", "-q", "-am", "agent: simplify")
git("checkout", "-q", "-b", "agent-scratch")
Path("NOTES.md").write_text("left uncommitted on another branch\n")
