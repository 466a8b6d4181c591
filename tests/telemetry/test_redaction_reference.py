"""The fast redaction equals redaction by its definition (``redaction_reference.py``) on every
text: fuzzed texts built from the rules' examples and the characters that have tripped the fast
path before, every glued pair of examples, and pinned cases. Each runs with the memory of lines
and plans cold, warm and off: those change only the speed."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ephyra.redaction import redact as redact_module
from ephyra.redaction.redact import redact, redact_lines
from ephyra.redaction.rules import RULES
from tests.telemetry import redaction_reference as reference
from tests.telemetry.pinned import load_input

EXAMPLES = [text for rule in RULES for text, _ in rule.positives] + [
    text for rule in RULES for text in rule.negatives
]
LINE_EXAMPLES = sorted({t for t in EXAMPLES if "\n" not in t})
# What joins or breaks secrets: separators, the characters patterns and lookarounds read,
# placeholders and their pieces, addresses to glue, characters whose lowercase changes length
# or is ASCII, invisible characters, and fragments of secrets.
GLUE = [
    *(" ", "\n", "\t", "=", ":", "@", "-", ".", "+", "%", "/", "_", "]", "'", '"', "\\", ","),
    *("a@b.co", "x@y.com", "[redacted:", "[redacted:secret]", "0", "1.2.3.4", "::1"),
    *("Bearer ", "Basic ", "password=", "token: ", "://", "user:pw@", "eyJ", "AKIA", "sk-"),
    *("\u0130", "\u212a", "\u017f", "\u00df", "\u00e9", "\u65e5", "\U0001f600"),
    *("\u200b", "\u200d", "\u00ad", "\ufeff", "\u202e", "\ufe0f", "\U000e0061"),
    *("Zk8qR2vLw9XbT4mN7pQs1YcH", "4111 1111 1111 1111", "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="),
]
PIECES = st.one_of(st.sampled_from(EXAMPLES), st.sampled_from(GLUE), st.text(max_size=16))
TEXTS = st.lists(PIECES, max_size=14).map("".join)


def same_as_the_definition(text: str) -> None:
    want = reference.redact(text)
    assert redact(text) == want, text
    assert redact_lines(text) == want.split("\n"), text


@pytest.fixture(params=["cold", "warm", "off"])
def memory(request):
    """The line and plan memory as the test wants it: emptied, kept between examples, or off."""
    saved = redact_module.set_line_cache_size(redact_module.LINE_CACHE_SIZE)
    if request.param == "off":
        redact_module.set_line_cache_size(0)
    yield request.param
    redact_module.set_line_cache_size(saved)


def test_the_definition_redacts_each_rule_example_as_the_table_says():
    for rule in RULES:
        for text, expected in rule.positives:
            assert reference.apply(rule, text) == expected, (rule.name, text)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_fuzzed_texts_are_redacted_as_the_definition_says(text):
    redact_module.set_line_cache_size(redact_module.LINE_CACHE_SIZE)  # nothing remembered
    same_as_the_definition(text)
    same_as_the_definition(text)  # and with its lines and plans remembered


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_fuzzed_texts_are_redacted_as_the_definition_says_with_no_memory(text):
    saved = redact_module.set_line_cache_size(0)
    try:
        same_as_the_definition(text)
    finally:
        redact_module.set_line_cache_size(saved)


def glued_pairs_are_redacted_as_the_definition_says(texts: list[str], glue: str) -> None:
    wants = {}
    for first in texts:
        for second in texts:
            text = first + glue + second
            wants[text] = reference.redact(text)
            assert redact(text) == wants[text], text
    saved = redact_module.set_line_cache_size(0)
    try:
        assert [redact(text) for text in wants] == list(wants.values())
    finally:
        redact_module.set_line_cache_size(saved)


def test_every_glued_pair_of_examples_is_redacted_as_the_definition_says():
    glued_pairs_are_redacted_as_the_definition_says(LINE_EXAMPLES, "")


@pytest.mark.parametrize("glue", [" ", "-", "\u200b"], ids=["space", "dash", "zwsp"])
def test_every_pair_of_secrets_joined_by_a_glue_is_redacted_as_the_definition_says(glue):
    positives = sorted({t for rule in RULES for t, _ in rule.positives if "\n" not in t})
    glued_pairs_are_redacted_as_the_definition_says(positives, glue)


PINNED = [
    # review, stop 11: the bearer token freed by a replacement between spaces
    "x Zk8qR2vLw9XbT4mN7pQs1YcH+Bearer a+Bearer abc123def456",
    # a key glued behind a card number starts at a word boundary once the number is gone
    "pan=5500-0000-0000-0004sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
    # addresses glued one behind another
    "mail a@b.co-x@y.com end",
    "a@b.co.x@y.com+p@q.org%r@s.net",
    "-".join(f"u{n}@d{n}.io" for n in range(40)),
    # invisible characters inside secrets, keys and placeholders
    "key AKIAIOSF\u200bODNN7EXAMPLE used",
    "pass\u00adword=hunter2 and to\u200bken: abc",
    "[redacted\u200b:secret]",
    "Bea\u2060rer abc123def456ghi789",
    # URL passwords with unencoded delimiters, and URLs that only look like them
    "https://deploy:pa/ss#w?rd@git.example.com/shop.git",
    "amqp://app:p@ss@mq:5672 and https://example.com/@alice and https://host:8080/@bob",
    # characters whose lowercase is ASCII, or longer
    "\u212aEY=x TO\u212aEN=hunter2 \u0130stanbul password=\u0130x \u017fecret=y",
    # private keys, OpenPGP too, across lines and cut short
    "a\n-----BEGIN PGP PRIVATE KEY BLOCK-----\nx\n-----END PGP PRIVATE KEY BLOCK-----\nb",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE\npassword=x\n10.0.0.1",
    # an address alone, as short as it gets
    "1.2.3.4",
    "::1",
    # JSON escaped once and twice
    '{\\"password\\": \\"hunter2\\"}',
    '{\\\\\\"password\\\\\\": \\\\\\"hunter2\\\\\\"}',
]


@pytest.mark.parametrize("text", PINNED)
def test_pinned_texts_are_redacted_as_the_definition_says(text, memory):
    same_as_the_definition(text)
    same_as_the_definition(text)


def test_the_pinned_samples_texts_are_redacted_as_the_definition_says():
    for text in load_input()["texts"]:
        same_as_the_definition(text)
