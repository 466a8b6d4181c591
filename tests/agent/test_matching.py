"""Failure ↔ signal matching: what counts as failing "the same way"."""

from __future__ import annotations

from pathlib import Path

import pytest

from ephyra.agent.matching import (
    SeenFailure,
    SeenFrame,
    Target,
    compare,
    normalise_message,
    output_failure,
    parse_traceback,
    same_path,
)
from ephyra.redaction.redact import redact
from tests.agent.projects import zero_division_signal

WORKTREE = Path("/data/worktrees/q-1/r1")

TRACEBACK = """\
Traceback (most recent call last):
  File "/data/worktrees/q-1/r1/tests/test_cart.py", line 9, in test_total
    assert total([]) == 0
  File "/data/worktrees/q-1/r1/shop/cart.py", line 6, in total
    return sum(prices) / len(prices)
           ~~~~~~~~~~~~^~~~~~~~~~~~~
ZeroDivisionError: division by zero
"""


def seen(exception_type="ZeroDivisionError", message="division by zero", file="shop/cart.py",
         function="total") -> SeenFailure:  # fmt: skip
    return SeenFailure(exception_type, message, SeenFrame(file, 6, function))


def test_a_traceback_gives_its_exception_and_frames():
    parsed = parse_traceback(TRACEBACK)

    assert parsed.exception_type == "ZeroDivisionError"
    assert parsed.message == "division by zero"
    assert [(f.file.rsplit("/", 1)[-1], f.line, f.function) for f in parsed.frames] == [
        ("test_cart.py", 9, "test_total"),
        ("cart.py", 6, "total"),
    ]


def test_a_chained_traceback_gives_the_exception_raised_last():
    text = TRACEBACK + (
        "\nThe above exception was the direct cause of the following exception:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/data/worktrees/q-1/r1/shop/views.py", line 3, in checkout\n'
        "    raise CheckoutError('cart 12 failed') from exc\n"
        "shop.views.CheckoutError: cart 12 failed\n"
    )

    parsed = parse_traceback(text)

    assert parsed.exception_type == "shop.views.CheckoutError"
    assert parsed.message == "cart 12 failed"
    assert [f.function for f in parsed.frames] == ["checkout"]


def test_a_multi_line_message_is_kept_whole():
    text = TRACEBACK.replace(
        "ZeroDivisionError: division by zero", "AssertionError: assert 3 == 5\n +  where 3 = f()"
    )

    assert parse_traceback(text).message == "assert 3 == 5\n +  where 3 = f()"


def test_text_without_a_traceback_gives_none():
    assert parse_traceback("all 12 tests passed") is None


def test_the_innermost_frame_in_the_worktree_is_the_one_compared():
    text = TRACEBACK.replace(
        "ZeroDivisionError",
        '  File "/data/worktrees/q-1/r1/.venv/lib/python3.11/site-packages/money.py", line 1,'
        " in divide\n    return a / b\nZeroDivisionError",
        1,
    )

    found = output_failure(text, WORKTREE, "")

    assert found.frame == SeenFrame("shop/cart.py", 6, "total")


def test_output_without_a_traceback_is_read_from_a_line_naming_the_exception():
    output = "12:00:01 ERROR worker shop.cart.ZeroDivisionError: division by zero\nexit 1\n"

    found = output_failure(output, WORKTREE, "ZeroDivisionError")

    assert found.exception_type == "shop.cart.ZeroDivisionError"
    assert found.message == "division by zero"
    assert found.traceback is False


@pytest.mark.parametrize(
    ("production", "test"),
    [
        ("cart 0x7f3a12 of user 42 is 'broken'", "cart 0x9c01 of user 7 is 'sold out'"),
        ("id 5b4c2f1e-9d3a-4c8e-b1a7-2f6e8d9c0a1b", "id 0e9f8a7b-6c5d-4e3f-a2b1-c0d9e8f7a6b5"),
        ("commit 1a2b3c4d5e6f7a8b missing", "commit 9f8e7d6c5b4a3f2e missing"),
        ('no column "price" in 3.5 rows', 'no column "total" in 12 rows'),
        ("  spaced   out\n message ", "spaced out message"),
    ],
)  # fmt: skip
def test_numbers_addresses_ids_and_quoted_values_do_not_tell_messages_apart(production, test):
    assert normalise_message(production) == normalise_message(test)


def test_words_still_tell_messages_apart():
    assert normalise_message("division by zero") != normalise_message("float division by zero")


def test_the_exceptions_name_before_the_message_is_ignored():
    assert normalise_message("ZeroDivisionError: division by zero", "ZeroDivisionError") == (
        "division by zero"
    )


def test_a_redacted_production_message_matches_the_secret_the_test_printed():
    # Production's message was redacted before it was stored; the test prints another token.
    stored = redact("bad token ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2")
    target = Target("AuthError", stored, None, None)
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"

    failure = seen("AuthError", f"bad token {token}")

    assert compare(failure, target).matches


def test_a_production_message_cut_short_matches_as_a_prefix():
    target = Target("ValueError", "the price list for store 12 is missing the ite…", None, None)

    assert compare(
        seen("ValueError", "the price list for store 7 is missing the item 'pear'"), target
    ).matches


def test_a_log_line_around_the_exceptions_message_matches():
    target = Target("ZeroDivisionError", "checkout of cart 12 failed: division by zero", None, None)

    assert compare(seen(message="division by zero"), target).matches


def test_the_failure_as_production_saw_it_matches_the_signal():
    verdict = compare(seen(), Target.from_signal(zero_division_signal()))

    assert verdict.matches
    assert (verdict.exception_type, verdict.message, verdict.frame) == (True, True, True)


def test_a_qualified_exception_name_matches_the_short_one_production_reported():
    target = Target.from_signal(zero_division_signal(exception_type="CartError", message=""))

    assert compare(seen("shop.cart.CartError", "x"), target).matches


def test_exceptions_of_the_same_name_from_different_modules_differ():
    target = Target("shop.cart.CartError", "", None, None)

    verdict = compare(seen("billing.CartError", "x"), target)

    assert not verdict.matches
    assert verdict.why == "the exception is billing.CartError, not shop.cart.CartError"


def test_another_exception_type_does_not_match():
    verdict = compare(seen("ValueError"), Target.from_signal(zero_division_signal()))

    assert not verdict.matches
    assert verdict.why == "the exception is ValueError, not ZeroDivisionError"


def test_the_same_exception_raised_in_another_function_does_not_match():
    verdict = compare(seen(function="average"), Target.from_signal(zero_division_signal()))

    assert not verdict.matches
    assert verdict.why == (
        "it is raised from shop/cart.py in average, not /srv/app/shop/cart.py in total"
    )


def test_the_same_function_name_in_another_file_does_not_match():
    verdict = compare(seen(file="billing/cart.py"), Target.from_signal(zero_division_signal()))

    assert not verdict.matches


def test_a_failure_with_no_frame_in_the_worktree_does_not_match_a_signal_with_an_in_app_frame():
    failure = SeenFailure("ZeroDivisionError", "division by zero", None)

    verdict = compare(failure, Target.from_signal(zero_division_signal()))

    assert not verdict.matches
    assert "no frame in the worktree" in verdict.why


def test_a_failure_read_from_plain_output_is_not_judged_by_a_frame_it_cannot_show():
    failure = SeenFailure("ZeroDivisionError", "division by zero", None, traceback=False)

    assert compare(failure, Target.from_signal(zero_division_signal())).matches


def test_a_signal_that_names_nothing_matches_nothing():
    target = Target("", "", None, None)

    verdict = compare(seen(), target)

    assert not verdict.matches
    assert "names no exception type, message or in-app frame" in verdict.why


def test_the_signals_innermost_in_app_frame_is_the_target():
    signal = zero_division_signal()

    target = Target.from_signal(signal)

    assert (target.frame_file, target.frame_function) == ("/srv/app/shop/cart.py", "total")


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        ("shop/cart.py", "/srv/app/shop/cart.py", True),
        ("/srv/app/shop/cart.py", "cart.py", True),
        ("shop/cart.py", "/srv/app/billing/cart.py", False),
        ("shop/cart.py", "/srv/app/shop/cart.pyc", False),
        ("C:\\app\\shop\\cart.py", "shop/cart.py", True),
        ("", "shop/cart.py", False),
    ],
)
def test_paths_are_the_same_file_when_one_ends_the_other(one, other, same):
    assert same_path(one, other) is same


def test_a_failure_survives_its_evidence():
    failure = seen()

    assert SeenFailure.from_evidence(failure.to_evidence()) == failure


def test_a_message_that_is_one_quoted_value_matches_it_unquoted():
    # str(KeyError("quantity")) is "'quantity'"; the OpenTelemetry SDK sends "quantity".
    assert normalise_message("'quantity'", "KeyError") == normalise_message("quantity", "KeyError")
    assert normalise_message("'quantity'") != normalise_message("'price'")


def test_two_quoted_values_are_not_one():
    assert normalise_message("'a' or 'b'") == "'…' or '…'"
