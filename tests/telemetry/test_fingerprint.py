"""Grouping: the same error from different hosts, users and times is one fingerprint; a
different place in the code is another; the value is stable and can be recomputed by hand."""

from __future__ import annotations

import hashlib
import json

import pytest
from opentelemetry._logs import SeverityNumber

from ephyra.telemetry import FINGERPRINT_VERSION, JSON, fingerprint, parameterise, parse_logs
from ephyra.telemetry.fingerprint import fingerprint_lines
from ephyra.telemetry.stack import Frame, parse_stack
from tests.telemetry import shop
from tests.telemetry.otel import OPTIONS, fixture, log_exception, log_request, otlp_json, raised


def candidate(error: BaseException, resource: dict | None = None):
    request = log_request(
        lambda log: log.emit(severity_number=SeverityNumber.ERROR, body="x", exception=error),
        resource,
    )
    [c] = parse_logs(json.dumps(otlp_json(request)).encode(), JSON, options=OPTIONS).candidates
    return c


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("order 81723 failed after 3.5s", "order <num> failed after <num>s"),
        ("user 6f1c1f4e-8b8a-4b0e-9a52-0c6d7e2f6a11 missing", "user <uuid> missing"),
        ("object at 0x7f3a9c0e1b2d", "object at <hex>"),
        ("commit da39a3ee5e6b4b0d3255bfef95601890afd80709 not found", "commit <hash> not found"),
        ("from 10.0.0.12 at 2026-01-05T09:00:00Z", "from <ip> at <ts>"),
        ("at 09:00:01.123 for bob@example.com", "at <ts> for <email>"),
        ("card [redacted:credit-card] for [redacted:email]", "card <num> for <email>"),
        ("token [redacted:github-token]", "token <redacted>"),
        ("  many   spaces\n and lines ", "many spaces and lines"),
        ("deadbeef and cafe stay words", "deadbeef and cafe stay words"),
    ],
)
def test_parameterising_replaces_what_varies_between_occurrences(message, expected):
    assert parameterise(message) == expected


def test_the_same_error_from_other_users_hosts_and_requests_is_one_fingerprint():
    a = candidate(raised(shop.pay, "alice@example.com", "req-1", 10), {"host.name": "a"})
    b = candidate(raised(shop.pay, "bob@example.org", "req-2", 99), {"host.name": "b"})
    assert a.fingerprint == b.fingerprint
    assert a.title != b.title  # the title keeps what the people reading it need


def test_a_different_innermost_app_frame_is_a_different_fingerprint():
    paid = candidate(raised(shop.pay, "alice@example.com", "req-1", 10))
    refunded = candidate(raised(shop.refund, "alice@example.com", "req-1", 10))
    assert paid.exception_type == refunded.exception_type and paid.message == refunded.message
    assert paid.fingerprint != refunded.fingerprint
    assert paid.culprit.endswith("in charge") and refunded.culprit.endswith("in refund")


def test_recursion_depth_does_not_split_a_group():
    assert (
        candidate(raised(shop.deep, 3)).fingerprint == candidate(raised(shop.deep, 7)).fingerprint
    )


def test_line_numbers_are_not_part_of_the_fingerprint_but_function_names_are():
    text = fixture("java_spring.txt")
    moved = text.replace("CheckoutService.java:42", "CheckoutService.java:57")
    renamed = text.replace("CheckoutService.total(", "CheckoutService.sum(")
    fp = [fingerprint("E", parse_stack(t).frames, "") for t in (text, moved, renamed)]
    assert fp[0] == fp[1] != fp[2]


def test_frames_decide_and_the_message_only_counts_without_them():
    frames = parse_stack(fixture("node_v8.txt")).frames
    assert fingerprint("TypeError", frames, "a") == fingerprint("TypeError", frames, "b")
    assert fingerprint("", (), "order 1 failed") == fingerprint("", (), "order 2 failed")
    assert fingerprint("", (), "order 1 failed") != fingerprint("", (), "payment 1 failed")


def test_library_frames_count_only_when_no_app_frame_exists():
    app = Frame("/app/a.py", 1, "f", None, True)
    lib = Frame("/usr/lib/python3.12/json/decoder.py", 2, "g", "json.decoder", False)
    other_lib = Frame("/usr/lib/python3.12/json/scanner.py", 2, "h", "json.scanner", False)
    assert fingerprint("E", (app, lib), "") == fingerprint("E", (app, other_lib), "")
    assert fingerprint("E", (lib,), "") != fingerprint("E", (other_lib,), "")


def test_a_fingerprint_is_the_sha256_of_its_documented_lines():
    frames = parse_stack(fixture("java_spring.txt")).frames
    lines = fingerprint_lines("java.lang.IllegalStateException", frames, "cart 81723 has no lines")
    assert lines == [
        "type:java.lang.IllegalStateException",
        "frame:com.acme.shop.checkout.CheckoutService|total",
        "frame:com.acme.shop.checkout.CheckoutController|lambda$checkout$0",
        "frame:com.acme.shop.checkout.CheckoutController|checkout",
    ]
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    value = fingerprint("java.lang.IllegalStateException", frames, "cart 81723 has no lines")
    assert value == f"v{FINGERPRINT_VERSION}:{digest}"
    # Pinned: if this changes, FINGERPRINT_VERSION must change with it.
    assert value == "v1:8684db7dcf2ea63667c12d2f65f1cd985cb63cdf189f6b6264f6be753419b46c"


def test_a_python_fingerprint_does_not_depend_on_where_the_checkout_lives():
    c = candidate(raised(shop.checkout, []))
    assert fingerprint_lines(c.exception_type, c.frames, c.message, OPTIONS.path_roots)[:3] == [
        "type:ZeroDivisionError",
        "frame:tests/telemetry/shop.py|average_price",
        "frame:tests/telemetry/shop.py|checkout",
    ]


def test_the_protobuf_and_json_paths_fingerprint_alike():
    error = raised(shop.checkout, [])
    request = log_exception(error)
    from_pb = parse_logs(request.SerializeToString(), "application/x-protobuf").candidates
    from_json = parse_logs(json.dumps(otlp_json(request)).encode(), JSON).candidates
    assert [c.fingerprint for c in from_pb] == [c.fingerprint for c in from_json]
