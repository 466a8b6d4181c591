"""A little application whose real exceptions the ingest tests send through OpenTelemetry."""

from __future__ import annotations


class PaymentDeclined(Exception):
    pass


def average_price(cart: list[int]) -> float:
    return sum(cart) / len(cart)


def checkout(cart: list[int]) -> float:
    return average_price(cart)


def charge(user: str, request_id: str, amount: int) -> None:
    raise PaymentDeclined(f"card declined for {user} (request {request_id}, amount {amount})")


def pay(user: str, request_id: str, amount: int) -> None:
    charge(user, request_id, amount)


def refund(user: str, request_id: str, amount: int) -> None:
    raise PaymentDeclined(f"card declined for {user} (request {request_id}, amount {amount})")


def lookup(sku: str) -> int:
    return {"SKU-1": 1}[sku]


def deep(n: int) -> int:
    return deep(n - 1) if n else average_price([])


def leak(password: str) -> None:
    url = f"postgres://shop:{password}@10.1.2.3:5432/shop"
    raise ConnectionError(f"could not connect to {url}")
