"""The redaction table, rule by rule; what it normalises; and the promise that nothing
unredacted leaves. (``test_redaction_reference.py`` holds the fast path equal to the definition.)"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry._logs import SeverityNumber

from ephyra.redaction import redact as redact_module
from ephyra.redaction.redact import (
    WITHHELD,
    apply_rule,
    lowercase,
    redact,
    redact_lines,
    shannon_entropy,
)
from ephyra.redaction.rules import RULES
from ephyra.telemetry import JSON, PROTOBUF, is_secret_key, parse_logs
from tests.telemetry import redaction_reference as reference
from tests.telemetry.otel import ROOT, fixture, log_request, otlp_json

DOC = ROOT / "docs" / "telemetry.md"
POSITIVES = [(r.name, text, want) for r in RULES for text, want in r.positives]
NEGATIVES = [(r.name, text) for r in RULES for text in r.negatives]
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


def secret_of(text: str, redacted: str) -> str:
    """What a positive example hides: the part of ``text`` its expected output replaced."""
    start = 0
    while start < min(len(text), len(redacted)) and text[start] == redacted[start]:
        start += 1
    end = 0
    while end < min(len(text), len(redacted)) - start and text[-1 - end] == redacted[-1 - end]:
        end += 1
    return text[start : len(text) - end]


# -- the table ------------------------------------------------------------------------------


def test_rule_names_are_unique_and_every_rule_has_both_kinds_of_example():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    for rule in RULES:
        assert rule.positives and rule.negatives, rule.name
        assert rule.placeholder == f"[redacted:{rule.name}]"


@pytest.mark.parametrize(("name", "text", "expected"), POSITIVES)
def test_each_positive_example_is_redacted_by_its_rule(name, text, expected):
    assert apply_rule(name, text) == expected
    secret = secret_of(text, expected)
    assert secret and secret not in redact(text)


@pytest.mark.parametrize(("name", "text"), NEGATIVES)
def test_each_negative_example_is_left_alone_by_every_rule(name, text):
    assert redact(text) == text


def woken(line: str) -> list[str]:
    """The rules the fast path would run on ``line``."""
    skeleton = line.encode().translate(redact_module._SKELETON).decode("latin-1")
    return [c.rule.name for c in redact_module._can_change(line, lowercase(line), skeleton)]


LINE_RULES = [r for r in RULES if r.name != "private-key"]


@pytest.mark.parametrize("rule", LINE_RULES, ids=lambda r: r.name)
def test_every_match_of_a_rules_examples_wakes_the_rule(rule):
    # A line a rule is not woken for is not scanned by it, so a wrong test there would hide a
    # secret (the comparison with the definition would find it too, on the lines it builds).
    for text, _ in rule.positives:
        lower = lowercase(text)
        matches = list(re.finditer(rule.pattern, lower if rule.lower else text))
        assert matches, text
        for match in matches:
            assert rule.name in woken(text[match.start() : match.end()]), text


@given(st.text(alphabet=st.sampled_from("0123456789aA:.@-_ =/+kKeyJ"), max_size=60), st.randoms())
def test_which_rules_a_line_wakes_does_not_depend_on_which_digits_it_has(line, random):
    other = "".join(random.choice("0123456789") if c.isdigit() else c for c in line)
    assert woken(line) == woken(other)


def test_the_documentation_lists_every_rule():
    doc = DOC.read_text()
    for rule in RULES:
        assert f"`{rule.name}`" in doc, rule.name


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("password", True),
        ("db.password", True),
        ("X-Api-Key", True),
        ("aws_secret_access_key", True),
        ("http.request.header.cookie", True),
        ("csrftoken", True),
        ("accessToken", True),
        ("session_id", True),
        ("db.pass\u200bword", True),
        ("password_reset", False),
        ("max_tokens", False),
        ("monkey", False),
        ("author", False),
        ("http.route", False),
    ],
)
def test_secret_keys_are_recognised_by_how_their_name_ends(key, secret):
    assert is_secret_key(key) is secret


def test_entropy_is_bits_per_character():
    assert shannon_entropy("") == 0.0 and shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abcd") == 2.0


# -- invisible characters (defect 16) --------------------------------------------------------

HIDERS = {
    "zero-width space": "\u200b",
    "zero-width non-joiner": "\u200c",
    "zero-width joiner": "\u200d",
    "word joiner": "\u2060",
    "byte order mark": "\ufeff",
    "soft hyphen": "\u00ad",
    "left-to-right mark": "\u200e",
    "right-to-left override": "\u202e",
    "first strong isolate": "\u2068",
    "variation selector 16": "\ufe0f",
    "tag letter a": "\U000e0061",
    "Hangul filler": "\u3164",
    "Mongolian vowel separator": "\u180e",
}


@pytest.mark.parametrize("hider", HIDERS.values(), ids=HIDERS.keys())
def test_an_invisible_character_inside_a_secret_does_not_hide_it(hider):
    assert (
        redact(f"key AKIAIOSF{hider}ODNN7EXAMPLE used") == "key [redacted:aws-access-key-id] used"
    )
    trace = f"Traceback\n  token ghp_{hider}{'a1B2c3D4e5' * 4}\nValueError: no"
    assert redact_lines(trace) == ["Traceback", "  token [redacted:github-token]", "ValueError: no"]


def test_the_text_returned_is_the_normalised_text():
    text = "caf\u00e9\u200b \u2067RTL\u2069 ok\ufe0f \U0001f600\u200d\U0001f600"
    assert redact(text) == "caf\u00e9 RTL ok \U0001f600\U0001f600"
    assert redact_lines(f"a\u200bb\n{text}") == ["ab", redact(text)]


def test_exactly_the_default_ignorable_characters_are_dropped():
    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    kept = "".join(c for c in everything if not reference.is_invisible(c))
    assert redact_module.normalise(everything) == kept
    assert len(everything) - len(kept) == 4174  # the count Unicode's file gives


# -- URL credentials and private keys (defect 16) ----------------------------------------------


@pytest.mark.parametrize("char", ["/", "#", "?", "@", "/#?@"])
def test_a_url_password_with_an_unencoded_delimiter_is_redacted_whole(char):
    text = f"clone https://deploy:s3cr{char}et-pw@git.example.com/shop.git failed"
    assert (
        redact(text) == "clone https://[redacted:url-credentials]@git.example.com/shop.git failed"
    )


def test_a_url_with_a_port_and_an_at_sign_in_its_path_loses_its_host_too():
    # "host:8080/@alice" reads as a user "host" whose password is "8080/": a password may hold
    # an unencoded "/", and the two cannot be told apart, so the safe reading wins.
    assert redact("see https://example.com/@alice") == "see https://example.com/@alice"
    assert redact("see https://host:8080/@alice") == "see https://[redacted:url-credentials]@alice"


PGP = (
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n"
    "lQOYBGXr1x0BCADQm4K7Z2J0c9wVt1kq8oXhN3pR\n"
    "=Zx8Q\n"
    "-----END PGP PRIVATE KEY BLOCK-----"
)


def test_an_openpgp_private_key_block_is_a_private_key():
    assert redact(f"gpg: importing\n{PGP}\ndone") == "gpg: importing\n[redacted:private-key]\ndone"
    cut_short = PGP.split("=Zx8Q")[0]
    assert redact(f"key {cut_short}") == "key [redacted:private-key]"
    public = PGP.replace("PRIVATE", "PUBLIC")
    assert "-----BEGIN PGP PUBLIC KEY BLOCK-----" in redact(public)


# -- leads from review ------------------------------------------------------------------------


def test_a_secret_freed_by_a_replacement_between_spaces_is_redacted_too():
    # The first "Bearer a+Bearer" fails the token check and hides the second Bearer; once the
    # long run before it is a placeholder, the bearer rule must read the line again.
    line = "x Zk8qR2vLw9XbT4mN7pQs1YcH+Bearer a+Bearer abc123def456"
    assert redact(line) == "x [redacted:high-entropy] a+Bearer [redacted:bearer-token]"


def test_twenty_addresses_glued_one_behind_another_are_all_redacted():
    line = "-".join(f"u{n}@d{n}.io" for n in range(20))
    assert redact(line) == "-".join(["[redacted:email]"] * 20)


@pytest.mark.parametrize("glue", ["-", ".", "+", "%"])
def test_an_address_glued_behind_another_is_redacted_too(glue):
    assert (
        redact(f"mail a@b.co{glue}x@y.com end")
        == f"mail [redacted:email]{glue}[redacted:email] end"
    )


def test_a_password_in_json_escaped_twice_is_redacted():
    # a JSON document in a string of a JSON document in a string (a nested attribute's text)
    once = json.dumps(json.dumps({"password": "hunter2", "user": "bob"}))
    twice = json.dumps({"inner": once})
    assert "hunter2" not in redact(twice) and "bob" in redact(twice)


def test_an_address_alone_in_a_field_is_redacted_however_short():
    assert [redact(t) for t in ("1.2.3.4", "::1", "a@b.io")] == [
        "[redacted:ipv4]",
        "[redacted:ipv6]",
        "[redacted:email]",
    ]


def test_a_line_still_changing_after_the_bound_is_withheld_whole():
    # two changes: the card number, then the key it hid (a placeholder ends in "]", the key's
    # word boundary)
    line = "pan=5500-0000-0000-0004sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345"
    settled = "pan=[redacted:credit-card][redacted:anthropic-key]"
    assert redact_module._redact_line(line, max_changes=2) == settled == reference.redact(line)
    assert redact_module._redact_line(line, max_changes=1) == WITHHELD
    everything = " | ".join(t for _, t, _ in POSITIVES if "\n" not in t)  # a change per rule
    assert redact(everything) == reference.redact(everything) != WITHHELD


# -- what the speed work must not change -----------------------------------------------------

_PIECES = st.sampled_from(
    [t for _, t, _ in POSITIVES] + [t for _, t in NEGATIVES] + [" ", "\n", "=", ":", "@", "\t"]
)


@given(st.lists(st.one_of(_PIECES, st.text(max_size=20)), max_size=12).map("".join))
def test_redaction_is_idempotent(text):
    once = redact(text)
    assert redact(once) == once


@given(st.lists(st.one_of(_PIECES, st.text(max_size=20)), max_size=12).map("".join))
def test_redacted_lines_are_the_redacted_text_split(text):
    assert redact_lines(text) == redact(text).split("\n")


def test_the_line_cache_changes_nothing_but_speed():
    text = "\n".join(t for _, t, _ in POSITIVES) + "\n" + fixture("java_spring.txt")
    cached = redact(text)
    assert redact(text) == cached
    saved = redact_module.set_line_cache_size(0)
    try:
        assert redact(text) == cached
    finally:
        redact_module.set_line_cache_size(saved)


def test_the_line_cache_and_the_plans_are_bounded():
    saved, saved_plans = redact_module.set_line_cache_size(10), redact_module.PLAN_CACHE_SIZE
    redact_module.PLAN_CACHE_SIZE = 10
    try:
        lines = [f"login {n} from 10.0.{n}.7 by user{n}@example.com id {n:x}Zq" for n in range(50)]
        outs = [redact(line) for line in lines]
        assert all("[redacted:ipv4]" in o and "[redacted:email]" in o for o in outs)
        assert len(redact_module._cache) <= 10 and len(redact_module._previous) <= 10
        assert len(redact_module._PLANS) <= 10
    finally:
        redact_module.set_line_cache_size(saved)
        redact_module.PLAN_CACHE_SIZE = saved_plans


SEEDED = [secret_of(text, want) for _, text, want in POSITIVES]


def test_a_signal_seeded_with_every_kind_of_secret_carries_none_of_them():
    everything = " | ".join(text for _, text, _ in POSITIVES)
    # An unterminated PEM block is redacted to the end of its text: the secrets go after the frames.
    stack = fixture("java_spring.txt") + everything
    attributes = {
        "exception.type": "java.lang.IllegalStateException",
        "exception.message": everything,
        "exception.stacktrace": stack,
        "note": everything,
        "nested": json.dumps({"inner": everything}),
        "list": [everything, everything],
        f"free {SEEDED[0]}": "key that is itself a secret",
    }

    def emit(log):
        log.emit(severity_number=SeverityNumber.ERROR, body=everything, attributes=attributes)

    request = log_request(emit, {"service.name": "shop", "deployment.environment": everything})
    request.resource_logs[0].scope_logs[0].scope.name = everything
    for result in (
        parse_logs(request.SerializeToString(), PROTOBUF),
        parse_logs(json.dumps(otlp_json(request)).encode(), JSON),
    ):
        [c] = result.candidates
        texts = [*c.texts(), c.fingerprint, c.trace_id, c.span_id]
        leaks = [(s, t[:80]) for s in SEEDED for t in texts if s in t]
        assert leaks == []
        assert c.exception_type == "java.lang.IllegalStateException"
        assert len(c.frames) == 11  # the secrets did not break the trace
