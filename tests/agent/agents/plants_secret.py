"""Fixes the code and hard-codes a token into it."""

from pathlib import Path

cart = Path("shop/cart.py")
token = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
cart.write_text(
    cart.read_text().replace("return sum(prices) / len(prices) * len(prices)", "return sum(prices)")
    + f'\nGITHUB_TOKEN = "{token}"\n'
)
