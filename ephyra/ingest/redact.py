"""Redaction: every text that leaves the ingest package has been through ``redact``.

The rules are data (``rules.py``); this module compiles them once and applies them in order.
``redact`` is idempotent: a placeholder is never taken for a secret, so ``redact(redact(t)) ==
redact(t)``. Attribute maps are also redacted by key name: the value of ``db.password`` is a
secret whatever it looks like.

Speed: every rule but the PEM one matches within a line (no pattern crosses a newline), so a
multi-line text is redacted line by line, and lines are remembered (``LINE_CACHE_SIZE``): a stack
trace's frame lines recur across every occurrence of an error, its message does not. A line
not seen before is looked at once for the characters the rules need (``@``, ``:``, ``=``, ``.``,
``-``, ``_``, an uppercase letter, a digit): only the rules it can satisfy are considered, and
each of those runs only when its cheap preconditions hold (substrings, digit or dot counts, a
long unbroken run), so a line without anything secret-shaped costs a few substring tests. Which
rules a line wakes is remembered by its digit skeleton (the same message with other ids is
examined once), and a rule's scan starts where its first match can begin.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import math
import re
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ephyra.ingest.rules import RULES, SECRET_KEY_WORDS, Rule

SECRET_PLACEHOLDER = "[redacted:secret]"
LINE_CACHE_SIZE = 32_768  # lines remembered per generation (raw → redacted, in memory only)
MAX_CACHED_LINE = 512

_WORDS = re.compile(r"[a-z]{4,}|[A-Z][a-z]{3,}")
_SEGMENTS = re.compile(r"[-_/]")
_UPPER = re.compile(r"[A-Z]")
_LOWER = re.compile(r"[a-z]")
_DIGIT = re.compile(r"[0-9]")
_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text`` (0 for the empty string)."""
    n = len(text)
    if not n:
        return 0.0
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _mixed_classes(text: str) -> bool:
    return bool(_UPPER.search(text) and _LOWER.search(text) and _DIGIT.search(text))


def _word_share(text: str) -> float:
    return sum(len(w) for w in _WORDS.findall(text)) / len(text)


# -- checks: (the original text, the match, the secret's text) → is it really one ------------


def _check_entropy(text: str, match: re.Match[str], secret: str) -> bool:
    # Identifiers (camelCase class names, pod names, slugs) are long and mixed too; what sets a
    # random token apart is a long unbroken run, high entropy, and no dictionary-like words.
    if len(secret) < 24 or not _mixed_classes(secret):
        return False
    if max(len(s) for s in _SEGMENTS.split(secret)) < 16:
        return False
    return shannon_entropy(secret) >= 3.5 and _word_share(secret) < 0.4


def _check_aws_secret(text: str, match: re.Match[str], secret: str) -> bool:
    return _mixed_classes(secret) and shannon_entropy(secret) >= 4.0 and _word_share(secret) < 0.4


def _check_luhn(text: str, match: re.Match[str], secret: str) -> bool:
    digits = [int(c) for c in secret if c.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _check_ipv6(text: str, match: re.Match[str], secret: str) -> bool:
    if not _DIGIT.search(secret) or ("::" not in secret and secret.count(":") < 7):
        return False
    try:
        ipaddress.IPv6Address(secret)
    except ValueError:
        return False
    return True


def _check_basic(text: str, match: re.Match[str], secret: str) -> bool:
    try:
        decoded = base64.b64decode(secret, validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def _check_tokenish(text: str, match: re.Match[str], secret: str) -> bool:
    return len(secret) >= 20 or (len(secret) >= 8 and bool(_DIGIT.search(secret)))


def _check_secret_key(text: str, match: re.Match[str], secret: str) -> bool:
    """The match starts at the key's last word; the whole key must end with a secret word."""
    start = match.start()
    while start and text[start - 1] in _KEY_CHARS:
        start -= 1
    return is_secret_key(text[start : match.end("stem")])


CHECKS: dict[str, Callable[[str, re.Match[str], str], bool]] = {
    "entropy": _check_entropy,
    "aws-secret": _check_aws_secret,
    "luhn": _check_luhn,
    "ipv6": _check_ipv6,
    "basic": _check_basic,
    "tokenish": _check_tokenish,
    "secret-key": _check_secret_key,
}


@dataclass(frozen=True, slots=True)
class _Compiled:
    rule: Rule
    regex: re.Pattern[str]
    # The groups that may hold the secret, in order; (0,) for the whole match. The first group
    # that took part in a match decides whether it is a secret.
    secret_groups: tuple[int | str, ...]
    check: Callable[[str, re.Match[str], str], bool] | None

    def apply(self, text: str, subject: str, start: int = 0) -> str:
        """Replace in ``text`` what the pattern finds in ``subject`` (``text`` or its
        lowercase copy, of the same length), from ``start`` on (where a match can begin: the
        lookbehinds still see what comes before)."""
        return self.replace(text, subject, start)[0]

    def replace(self, text: str, subject: str, start: int = 0) -> tuple[str, bool]:
        """``apply``, and whether a replaced secret touched other text: a character next to it
        that is not whitespace (nor the line's end), which now sits next to a placeholder."""
        pieces: list[str] = []
        last = 0
        glued = False
        groups, check = self.secret_groups, self.check
        for match in self.regex.finditer(subject, start):
            # Where the secret lies, inline (a line with secrets runs this for every match).
            for group in groups:
                lo, hi = match.span(group)
                if lo >= 0:
                    break  # (-1, -1) is a group that took no part
            if (
                lo == hi  # no group took part, or the secret is empty
                or text.startswith("[redacted:", lo, hi)
                or (check is not None and not check(text, match, text[lo:hi]))
            ):
                continue
            if not glued:
                glued = (lo > 0 and not text[lo - 1].isspace()) or (
                    hi < len(text) and not text[hi].isspace()
                )
            pieces.append(text[last:lo])
            pieces.append(self.rule.placeholder)
            last = hi
        if not pieces:
            return text, False
        pieces.append(text[last:])
        return "".join(pieces), glued


def _compile(rule: Rule) -> _Compiled:
    regex = re.compile(rule.pattern)
    groups = tuple(sorted(n for n in regex.groupindex if n.startswith("secret")))
    check = CHECKS[rule.check] if rule.check else None
    return _Compiled(rule, regex, groups or (0,), check)


_COMPILED: tuple[_Compiled, ...] = tuple(_compile(r) for r in RULES)
_BY_NAME = {c.rule.name: c for c in _COMPILED}
_WHOLE_TEXT = _BY_NAME["private-key"]  # the one rule that spans lines


def _shortest(pattern: str) -> int:
    """The fewest characters a match can have (the parser's own bound; 0 if it cannot say)."""
    try:
        return int(re._parser.parse(pattern).getwidth()[0])  # type: ignore[attr-defined]
    except Exception:  # an optimisation only: without the bound every rule simply runs
        return 0


def apply_rule(name: str, text: str) -> str:
    """One rule alone (for the rule table's own examples)."""
    compiled = _BY_NAME[name]
    return compiled.apply(text, text.lower() if compiled.rule.lower else text)


def _lowercase(text: str) -> str:
    lowered = text.lower()
    # Spans found in the lowercase copy are replaced in the original: keep the lengths equal.
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


# -- which rules a line can wake ------------------------------------------------------------
# Every precondition is a plain substring test or one C call on the line: a Python-level step
# costs as much as a short regular-expression scan, and most lines wake no rule at all.

_AT, _COLON, _EQUALS, _DOT, _DASH, _UNDERSCORE, _UPPER_BIT, _DIGIT_BIT, _SEP = (
    1 << n for n in range(9)
)
_FEATURE_BITS = {
    "@": _AT,
    ":": _COLON,
    "=": _EQUALS,
    ".": _DOT,
    "-": _DASH,
    "_": _UNDERSCORE,
    "upper": _UPPER_BIT,
    "digit": _DIGIT_BIT,
    "sep": _SEP,
}


# Screens on the line's UTF-8 bytes (bytes.translate is a table lookup per byte, several times
# cheaper than str.translate): a run of token characters; digits with the spaces and dashes
# between them gone (a card number's digits then stand together, and little else's do); and a
# digit before a dot (an IPv4 address has three).
_RUN_BYTES = bytes(
    0x61 if chr(i) in string.ascii_letters + string.digits + "+/=_-" else 0x20 for i in range(256)
)
_DIGIT_RUNS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x78 for i in range(256))
_CARD_SEPARATORS = b" -"
_DIGIT_SKELETON = bytes(0x30 if 0x30 <= i <= 0x39 else i for i in range(256))
SCREENS = ("run", "digits", "ipv4", "colons")  # digits:N = N digits, spaces or dashes between
_RUN_SCREEN, _DIGITS_SCREEN, _IPV4_SCREEN, _COLONS_SCREEN = range(1, 5)


def _parse_screen(name: str) -> tuple[int, bytes]:
    """(kind, what the translated bytes must contain); (0, b"") for no screen."""
    if not name:
        return 0, b""
    kind, _, arg = name.partition(":")
    if kind not in SCREENS:
        raise ValueError(f"unknown screen {name!r}")
    needle = {"run": b"a", "digits": b"0"}.get(kind, b"") * int(arg or 0)
    return SCREENS.index(kind) + 1, needle


def _gate(hints: tuple[str, ...]) -> str:
    """The longest text every one of ``hints`` contains, tested before the hints themselves
    ("gh" for GitHub's prefixes); "" for a single hint or when they share nothing."""
    if len(hints) < 2:
        return ""
    first = min(hints, key=len)
    for size in range(len(first), 0, -1):
        for start in range(len(first) - size + 1):
            part = first[start : start + size]
            if all(part in hint for hint in hints):
                return part
    return ""


def _any_hint(hints: tuple[str, ...]) -> re.Pattern[str] | None:
    """Many hints are one search (their common first letter found once, then the branches):
    cheaper than a substring test each. Exactly as strict: it finds one iff one occurs."""
    if len(hints) <= 3:
        return None
    return re.compile("|".join(map(re.escape, sorted(hints, key=len, reverse=True))))


# -- where a rule's first match can begin --------------------------------------------------
# A pattern led by a lookbehind or \b is tried at every position of the line, and most of a line
# lies before anything the rule could match. Each window below is the first position a match can
# begin at, from what every match holds (-1: none can), and the scan starts there; the lookbehind
# still reads the character before it, so the matches are the same. ``raw`` is the line's UTF-8
# and ``skeleton`` that with each digit a 0: their offsets are the line's when it is ASCII.

_EMAIL_LOCAL = string.ascii_letters + string.digits + "._%+-"


def _email_window(text: str, lower: str, raw: bytes, skeleton: bytes) -> int:
    # local part then "@": a match beginning before the first "@" has its local part end there,
    # so it begins where the run of local-part characters before that "@" does.
    at = text.find("@")
    return len(text[:at].rstrip(_EMAIL_LOCAL)) if at >= 0 else -1


def _ipv4_window(text: str, lower: str, raw: bytes, skeleton: bytes) -> int:
    # an octet (1-3 digits) and a dot first: at most two characters before the first digit
    # that a dot follows.
    if len(raw) != len(text):
        return 0
    first = skeleton.find(b"0.")
    return max(first - 2, 0) if first >= 0 else -1


def _ipv6_window(text: str, lower: str, raw: bytes, skeleton: bytes) -> int:
    # up to four hex digits, then a colon
    first = text.find(":")
    return max(first - 4, 0) if first >= 0 else -1


def _run_window(size: int) -> Callable[[str, str, bytes, bytes], int]:
    needle = b"a" * size

    def window(text: str, lower: str, raw: bytes, skeleton: bytes) -> int:
        # the whole match lies in a run of token characters at least ``size`` long
        if len(raw) != len(text):
            return 0
        return raw.translate(_RUN_BYTES).find(needle)

    return window


def _hint_window(hint: str, on_lower: bool) -> Callable[[str, str, bytes, bytes], int]:
    def window(text: str, lower: str, raw: bytes, skeleton: bytes) -> int:
        # every match begins with the hint
        return (lower if on_lower else text).find(hint)

    return window


_WINDOWS: dict[str, Callable[[str, str, bytes, bytes], int]] = {
    "email": _email_window,
    "ipv4": _ipv4_window,
    "ipv6": _ipv6_window,
    "high-entropy": _run_window(24),
    "aws-secret-key": _run_window(40),
    "jwt": _hint_window("eyJ", False),
    "bearer-token": _hint_window("bearer", True),
    "basic-auth": _hint_window("basic", True),
}


# One line rule: (compiled, pattern on the lowercase copy, shortest match, needs as bits, gate,
# hints, their search when they are many, hints in the lowercase copy, screen kind and needle,
# window, position in the table).
_LineRule = tuple[
    _Compiled,
    bool,
    int,
    int,
    str,
    tuple[str, ...],
    "re.Pattern[str] | None",
    tuple[str, ...],
    int,
    bytes,
    "Callable[[str, str, bytes, bytes], int] | None",
    int,
]


def _line_rule(position: int, c: _Compiled) -> _LineRule:
    mask = 0
    for need in c.rule.needs:
        mask |= _FEATURE_BITS[need]
    kind, needle = _parse_screen(c.rule.screen)
    hints = c.rule.hints
    return (c, c.rule.lower, _shortest(c.rule.pattern), mask, _gate(hints), hints,
            _any_hint(hints), c.rule.hints_lower, kind, needle,
            _WINDOWS.get(c.rule.name), position)  # fmt: skip


_LINE_RULES: tuple[_LineRule, ...] = tuple(
    _line_rule(i, c) for i, c in enumerate(c for c in _COMPILED if c is not _WHOLE_TEXT)
)
_BY_FEATURES: dict[tuple[int, int], Callable[[str, str, bytes, bytes], tuple]] = {}
_cache: dict[str, str] = {}
_previous: dict[str, str] = {}


def _rules_for(mask: int, after: int = -1) -> Callable[[str, str, bytes, bytes], tuple]:
    """The gate of the rules whose needs the line meets, in order, from the one after position
    ``after``: a function of the line that returns those of them whose length bound, hints and
    screens it meets (built once per combination)."""
    found = _BY_FEATURES.get((mask, after))
    if found is None:
        rules = tuple(r for r in _LINE_RULES if r[11] > after and r[3] & ~mask == 0)
        found = _BY_FEATURES[mask, after] = _gate_function(rules)
    return found


def _gate_function(rules: tuple[_LineRule, ...]) -> Callable[[str, str, bytes, bytes], tuple]:
    """``rules``' gate, written out as Python: each rule one ``if`` holding only the tests it has
    (its length bound, its hints, its screen), cheapest first. A line that misses the plan cache
    runs it, and a loop over the rules testing what each one has costs several times as much
    (``text`` is the line, ``lower`` its lowercase copy, ``raw`` its UTF-8, ``skeleton`` that
    with every digit a 0)."""
    names: dict[str, Any] = {"_RUN_BYTES": _RUN_BYTES, "_DIGIT_RUNS": _DIGIT_RUNS}
    names["_CARD_SEPARATORS"] = _CARD_SEPARATORS
    body = ["def gate(text, lower, raw, skeleton):", "    size = len(text)", "    out = []"]
    screens = {r[8] for r in rules}
    if _RUN_SCREEN in screens:
        body.append("    runs = raw.translate(_RUN_BYTES)")
    if _DIGITS_SCREEN in screens:
        body.append("    digits = raw.translate(_DIGIT_RUNS, _CARD_SEPARATORS)")
    for n, rule in enumerate(rules):
        _, _, shortest, _, gate, hints, any_hint, hints_lower, screen, needle, _, _ = rule
        names[f"rule{n}"] = rule
        tests = [f"size >= {shortest}"] if shortest else []
        if gate:
            tests.append(f"{gate!r} in text")
        if any_hint is not None:
            names[f"hints{n}"] = any_hint
            tests.append(f"hints{n}.search(text) is not None")
        elif hints:
            tests.append("(" + " or ".join(f"{h!r} in text" for h in hints) + ")")
        if hints_lower:
            tests.append("(" + " or ".join(f"{h!r} in lower" for h in hints_lower) + ")")
        if screen == _RUN_SCREEN:
            tests.append(f"{needle!r} in runs")
        elif screen == _DIGITS_SCREEN:
            tests.append(f"{needle!r} in digits")
        elif screen == _IPV4_SCREEN:
            tests.append('skeleton.count(b"0.") >= 3')
        elif screen == _COLONS_SCREEN:
            tests.append('("::" in text or text.count(":") >= 7)')
        body.append(f"    if {' and '.join(tests) or 'True'}:")
        body.append(f"        out.append(rule{n})")
    body.append("    return tuple(out)")
    exec("\n".join(body), names)  # the source is built above from the rule table alone
    return names["gate"]


# Which rules a line wakes does not depend on which digits it has (no hint holds a digit; the
# needs and screens count digits, not read them), so it is remembered by the line's skeleton,
# every digit a 0: the same message with another id, port, line number or address is looked at
# once. Like the line cache, in memory only.
_PLANS: dict[bytes, tuple[int, tuple[_LineRule, ...]]] = {}
_REPLANS: dict[tuple[bytes, int, int], tuple[_LineRule, ...]] = {}
PLAN_CACHE_SIZE = 8192
# Passes over the rules after a replacement, at most. Each replacement turns text that is not a
# placeholder into one, so the passes end by themselves; the bound keeps a line's cost bounded
# whatever it holds (after it, rules still run, each once more, on what the last one left).
_MAX_RESTARTS = 16


def _plan(text: str, lower: str, raw: bytes, skeleton: bytes) -> tuple[int, tuple[_LineRule, ...]]:
    """Which of the ``needs`` features the line has, as bits, and the rules its gate lets
    through; remembered by the line's skeleton. One call, unrolled: every line not seen before
    in this shape comes here."""
    mask = 0
    if "@" in text:
        mask |= _AT
    if ":" in text:
        mask |= _COLON | _SEP
    if "=" in text:
        mask |= _EQUALS | _SEP
    if "." in text:
        mask |= _DOT
    if "-" in text:
        mask |= _DASH
    if "_" in text:
        mask |= _UNDERSCORE
    if text != lower:
        mask |= _UPPER_BIT
    if skeleton != raw or b"0" in raw:  # the skeleton differs where a digit 1-9 was
        mask |= _DIGIT_BIT
    plan = mask, _rules_for(mask)(text, lower, raw, skeleton)
    _remember_plan(_PLANS, skeleton, plan)
    return plan


def _remember_plan(plans: dict[Any, Any], key: Any, plan: Any) -> None:
    if LINE_CACHE_SIZE:  # off, every line is looked at afresh (the benchmark's cold row)
        if len(plans) >= PLAN_CACHE_SIZE:
            plans.clear()
        plans[key] = plan


def _redact_line(text: str) -> str:
    # The needs are read once, from the line as it came; the length, hints and screens from the
    # line as the rules before have left it.
    lower = text.lower()
    if len(lower) != len(text):  # _lowercase, inline: this runs for every line not seen before
        lower = text.translate(_ASCII_LOWER)
    raw = text.encode("utf-8", "surrogatepass")
    skeleton = raw.translate(_DIGIT_SKELETON)
    mask, todo = _PLANS.get(skeleton) or _plan(text, lower, raw, skeleton)
    if not todo:  # most lines wake no rule
        return text
    i = restarts = 0
    while i < len(todo):
        rule = todo[i]
        i += 1
        start = 0
        if rule[10] is not None:
            start = rule[10](text, lower, raw, skeleton)
            if start < 0:
                continue
        out, glued = rule[0].replace(text, lower if rule[1] else text, start)
        if out is text:
            continue
        # The rules after this one read the new text. Its secrets were in the old text, with
        # the features they need, so the rules chosen from the old text still cover them.
        # When a replaced secret touched other text, the rules before this one read it again
        # too: a placeholder ends in "]", so a token glued to the secret (a card number with a
        # key right after it) now starts at a word boundary. A secret between whitespace changes
        # nothing any rule sees: no pattern begins or ends with whitespace, and no lookaround
        # reaches past it. The rule that replaced reads its output again too: a rule alone is
        # not always idempotent (an address glued behind another, "a@b.co-x@y.com", is only
        # an address once the first is a placeholder).
        text, lower = out, _lowercase(out)
        raw = text.encode("utf-8", "surrogatepass")
        skeleton = raw.translate(_DIGIT_SKELETON)
        if restarts == _MAX_RESTARTS:
            continue  # no more passes: the rest of this one reads the new text
        after = rule[11] if not glued else -1
        key = (skeleton, mask, after)
        replan = _REPLANS.get(key)
        if replan is None:
            replan = _rules_for(mask, after)(text, lower, raw, skeleton)
            _remember_plan(_REPLANS, key, replan)
        todo, i = replan, 0
        restarts += glued
    return text


def _cached_line(text: str) -> str:
    """A line's redaction, remembered; for a line the cache's current generation does not hold
    (callers look there first)."""
    # The shortest shapes: "::1", "a@b.io", "pwd=x"; anything else needs eight characters.
    if len(text) < 8 and not ("@" in text or ":" in text or "=" in text):
        return text
    if len(text) > MAX_CACHED_LINE or not LINE_CACHE_SIZE:
        return _redact_line(text)
    global _cache, _previous
    found = _previous.get(text)
    if found is None:
        found = _redact_line(text)
    if len(_cache) >= LINE_CACHE_SIZE:
        # Two generations: the lines still in use move over as they are met again, the
        # one-off messages and ids go with the old generation.
        _previous, _cache = _cache, {}
    _cache[text] = found
    return found


def set_line_cache_size(size: int) -> int:
    """Remember up to ``size`` lines (0: none) and forget the ones remembered, and which rules
    lines woke; returns the old size. For benchmarks and tests: the results are the same."""
    global LINE_CACHE_SIZE
    old, LINE_CACHE_SIZE = LINE_CACHE_SIZE, size
    _cache.clear()
    _previous.clear()
    _PLANS.clear()
    _REPLANS.clear()
    return old


def redact(text: str) -> str:
    """``text`` with every secret the rules recognise replaced by its typed placeholder."""
    # A remembered line is already its full redaction: the PEM rule, applied to one line, is
    # part of what was remembered (a line left after it has no PEM header). Most texts are
    # remembered lines, so they are looked up before anything else (a text with a newline, or
    # shorter than any secret, is simply not found).
    hit = _cache.get(text)
    if hit is not None:
        return hit
    if len(text) < 3:
        return text
    if "\n" not in text:
        if "PRIVATE KEY-----" in text:
            text = _WHOLE_TEXT.apply(text, text)
        return _cached_line(text)
    return "\n".join(_redacted_lines(text))


def redact_lines(text: str) -> list[str]:
    """``redact(text).split("\\n")``, without the join and the split (the stack parser reads
    the lines)."""
    if len(text) < 3:
        return text.split("\n")
    if "\n" not in text:
        return [redact(text)]
    return _redacted_lines(text)


def _redacted_lines(text: str) -> list[str]:
    if "PRIVATE KEY-----" in text:
        text = _WHOLE_TEXT.apply(text, text)
        if "\n" not in text:
            return [_cached_line(text)]
    if not LINE_CACHE_SIZE:
        return [_redact_line(line) for line in text.split("\n")]
    get = _cache.get  # the current generation; _cached_line looks in the older one
    return [
        hit if (hit := get(line)) is not None else _cached_line(line) for line in text.split("\n")
    ]


def is_secret_key(key: str) -> bool:
    """Whether an attribute named ``key`` holds a secret (``db.password``, ``X-Api-Key``…)."""
    return key.lower().endswith(SECRET_KEY_WORDS)
