"""The redaction table, rule by rule, and the promise that nothing unredacted leaves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry._logs import SeverityNumber

from ephyra.ingest import JSON, PROTOBUF, is_secret_key, parse_logs
from ephyra.ingest import redact as redact_module
from ephyra.ingest.redact import apply_rule, redact, shannon_entropy
from ephyra.ingest.rules import RULES
from tests.ingest.otel import fixture, log_request, otlp_json

DOC = Path(__file__).resolve().parents[2] / "docs" / "ingest.md"
POSITIVES = [(r.name, text, want) for r in RULES for text, want in r.positives]
NEGATIVES = [(r.name, text) for r in RULES for text in r.negatives]


def secret_of(text: str, redacted: str) -> str:
    """What a positive example hides: the part of ``text`` its expected output replaced."""
    start = 0
    while start < min(len(text), len(redacted)) and text[start] == redacted[start]:
        start += 1
    end = 0
    while end < min(len(text), len(redacted)) - start and text[-1 - end] == redacted[-1 - end]:
        end += 1
    return text[start : len(text) - end]


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


def _has(span: str, need: str) -> bool:
    if need == "upper":
        return any(c.isupper() for c in span)
    if need == "digit":
        return any(c.isdigit() for c in span)
    if need == "sep":
        return ":" in span or "=" in span
    return need in span


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_every_match_of_a_rule_has_what_the_rule_says_it_needs(rule):
    # A line without a need skips the rule unread, so a wrong need would hide a secret.
    for text, _ in rule.positives:
        subject = text.lower() if rule.lower else text
        matches = list(re.finditer(rule.pattern, subject))
        assert matches, text
        for match in matches:
            span = text[match.start() : match.end()]
            assert all(_has(span, need) for need in rule.needs), (span, rule.needs)


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


def test_a_secret_glued_behind_another_is_redacted_in_the_same_pass():
    # A placeholder ends in "]": the key after the card number then starts at a word boundary,
    # so the rules that ran before the card's must read the line again.
    text = "pan=5500-0000-0000-0004sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345"
    assert redact(text) == "pan=[redacted:credit-card][redacted:anthropic-key]"


@pytest.mark.parametrize("first", sorted({t for _, t, _ in POSITIVES if "\n" not in t}))
def test_every_pair_of_glued_examples_is_redacted_to_a_fixed_point(first):
    for _, second, _ in POSITIVES:
        once = redact(first + second)
        assert redact(once) == once, (first, second)


_PIECES = st.sampled_from(
    [t for _, t, _ in POSITIVES] + [t for _, t in NEGATIVES] + [" ", "\n", "=", ":", "@", "\t"]
)


@given(st.lists(st.one_of(_PIECES, st.text(max_size=20)), max_size=12).map("".join))
def test_redaction_is_idempotent(text):
    once = redact(text)
    assert redact(once) == once


@given(
    st.lists(
        st.one_of(_PIECES, st.text(alphabet=st.characters(exclude_characters="\n"))), max_size=8
    )
)
def test_line_by_line_is_the_same_as_the_whole_text(pieces):
    lines = [p.replace("\n", " ") for p in pieces if "PRIVATE KEY" not in p]
    assert redact("\n".join(lines)) == "\n".join(redact(line) for line in lines)


def test_the_line_cache_changes_nothing_but_speed():
    # (Without the PEM examples: only their rule spans lines, so only they differ line by line.)
    text = "\n".join(t for n, t, _ in POSITIVES if n != "private-key")
    text += "\n" + fixture("java_spring.txt")
    lines = text.split("\n")
    cached = redact(text)
    assert redact(text) == cached and [redact(line) for line in lines] == cached.split("\n")
    saved = redact_module.set_line_cache_size(0)
    try:
        assert redact(text) == cached
        assert [redact(line) for line in lines] == cached.split("\n")
    finally:
        redact_module.set_line_cache_size(saved)


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


def test_the_line_cache_is_bounded():
    saved = redact_module.set_line_cache_size(10)
    try:
        for n in range(50):
            redact(f"unique line {n} with 10.0.0.{n}")
        assert len(redact_module._cache) <= 10 and len(redact_module._previous) <= 10
    finally:
        redact_module.set_line_cache_size(saved)


@given(st.lists(st.one_of(_PIECES, st.text(max_size=20)), max_size=12).map("".join))
def test_redacted_lines_are_the_redacted_text_split(text):
    assert redact_module.redact_lines(text) == redact(text).split("\n")


def test_what_a_line_wakes_is_remembered_by_its_digit_skeleton_and_bounded():
    saved = redact_module.PLAN_CACHE_SIZE
    redact_module.PLAN_CACHE_SIZE = 10
    try:
        lines = [
            f"login {n} from 10.0.{n}.7 by user{n}@example.com, password={n}x" for n in range(50)
        ]
        outs = [redact(line) for line in lines]
        assert all("[redacted:ipv4]" in o and "[redacted:email]" in o for o in outs)
        assert len(redact_module._PLANS) <= 10 and len(redact_module._REPLANS) <= 10
        redact_module.set_line_cache_size(redact_module.set_line_cache_size(0))
        assert [redact(line) for line in lines] == outs
    finally:
        redact_module.PLAN_CACHE_SIZE = saved


def _reference(line: str) -> str:
    """Redaction by its definition, with none of the speed work: every line rule over the whole
    line, in table order, starting again from the first after any change, until none changes
    it. The fast path reads needs, screens, windows and remembered plans to skip most of this;
    it must come to the same text."""
    rules = [c for c in redact_module._COMPILED if c is not redact_module._WHOLE_TEXT]
    for _ in range(64):
        for c in rules:
            out = c.apply(line, redact_module._lowercase(line) if c.rule.lower else line)
            if out != line:
                line = out
                break
        else:
            return line
    raise AssertionError(f"no fixed point for {line!r}")


_GLUE = st.sampled_from(["a@b.co", "x@y.com", "-", ".", "+", "%", "=", "]", "[redacted:", "0"])
_LINE = st.lists(st.one_of(_PIECES, _GLUE, st.text(max_size=20)), max_size=12).map(
    lambda pieces: "".join(pieces).replace("\n", " ")
)


@settings(max_examples=1000)
@given(_LINE)
def test_a_line_is_redacted_as_the_rules_alone_would_redact_it(line):
    redact_module.set_line_cache_size(redact_module.set_line_cache_size(0))  # no plan remembered
    assert redact_module._redact_line(line) == _reference(line)
    assert redact_module._redact_line(line) == _reference(line)  # and with its plan remembered


@pytest.mark.parametrize("first", sorted({t for _, t, _ in POSITIVES if "\n" not in t}))
def test_glued_examples_are_redacted_as_the_rules_alone_would(first):
    for _, second, _ in POSITIVES:
        if "\n" not in second:
            assert redact_module._redact_line(first + second) == _reference(first + second)


@pytest.mark.parametrize("glue", ["-", ".", "+", "%"])
def test_an_address_glued_behind_another_is_redacted_too(glue):
    # The address rule alone finds only the first: the second becomes an address (its local
    # part no longer glued to a word) once the first is a placeholder. Redacting it again is
    # what the rules alone do, so the second pass must run (found in review).
    line = f"mail a@b.co{glue}x@y.com end"
    assert redact(line) == "mail [redacted:email][redacted:email] end"
    assert redact_module._redact_line(line) == _reference(line)


def test_a_redaction_is_redacted_again_not_taken_from_the_cache_as_final():
    # The line path can miss a secret a second pass finds (review): the redacted text must not
    # be remembered as its own redaction, or a title that repeats it would keep the token.
    line = "x Zk8qR2vLw9XbT4mN7pQs1YcH+Bearer a+Bearer abc123def456"
    once = redact(line)
    assert redact(once) == redact_module._redact_line(once)
    assert redact(once).endswith("[redacted:bearer-token]")


def test_a_line_cut_short_by_the_bound_on_passes_is_not_taken_for_its_own_redaction(
    monkeypatch,
):
    monkeypatch.setattr(redact_module, "_MAX_RESTARTS", 0)
    redact_module.set_line_cache_size(redact_module.set_line_cache_size(0))
    line = "pan=5500-0000-0000-0004sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345"
    once = redact(line)
    assert once == "pan=[redacted:credit-card]sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345"
    assert redact_module._cache.get(once) is None
    assert redact(once) == "pan=[redacted:credit-card][redacted:anthropic-key]"
