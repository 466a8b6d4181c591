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
long unbroken run), so a line without anything secret-shaped costs a few substring tests.
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
_RUN = str.maketrans(dict.fromkeys(string.ascii_letters + string.digits + "+/=_-", "a"))
_NOT_DIGITS = str.maketrans("", "", "".join(c for c in map(chr, range(128)) if not c.isdigit()))
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


# -- screens: cheap preconditions, on the line's UTF-8 bytes (bytes.translate is a table lookup
# per byte, several times cheaper than str.translate) ------------------------------------------

_RUN_BYTES = bytes(
    0x61 if chr(i) in string.ascii_letters + string.digits + "+/=_-" else 0x20 for i in range(256)
)
# Digits as "0", everything else as "x" but spaces and dashes, which go: a card number's digits
# then stand together, and little else's do.
_DIGIT_RUNS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x78 for i in range(256))
_CARD_SEPARATORS = b" -"
_DIGIT_SKELETON = bytes(0x30 if 0x30 <= i <= 0x39 else i for i in range(256))
SCREENS = ("run", "digits", "ipv4", "colons")  # digits:N = N digits, spaces or dashes between


def _parse_screen(name: str) -> tuple[str, int] | None:
    if not name:
        return None
    kind, _, arg = name.partition(":")
    if kind not in SCREENS:
        raise ValueError(f"unknown screen {name!r}")
    return kind, int(arg or 0)


@dataclass(frozen=True, slots=True)
class _Compiled:
    rule: Rule
    regex: re.Pattern[str]
    secret_groups: tuple[str, ...]
    check: Callable[[str, re.Match[str], str], bool] | None
    screen: tuple[str, int] | None

    def _span(self, text: str, match: re.Match[str]) -> tuple[int, int] | None:
        """Where the secret of ``match`` lies in ``text``, or None when it is not one."""
        for name in self.secret_groups or (0,):
            if match.group(name) is None:
                continue
            lo, hi = match.span(name)
            secret = text[lo:hi]
            if not secret or secret.startswith("[redacted:"):
                return None
            if self.check is not None and not self.check(text, match, secret):
                return None
            return lo, hi
        return None

    def apply(self, text: str, subject: str) -> str:
        """Replace in ``text`` what the pattern finds in ``subject`` (``text`` or its
        lowercase copy, of the same length)."""
        pieces: list[str] = []
        last = 0
        for match in self.regex.finditer(subject):
            span = self._span(text, match)
            if span is None:
                continue
            pieces.append(text[last : span[0]])
            pieces.append(self.rule.placeholder)
            last = span[1]
        if not pieces:
            return text
        pieces.append(text[last:])
        return "".join(pieces)


def _compile(rule: Rule) -> _Compiled:
    regex = re.compile(rule.pattern)
    groups = tuple(sorted(n for n in regex.groupindex if n.startswith("secret")))
    check = CHECKS[rule.check] if rule.check else None
    return _Compiled(rule, regex, groups, check, _parse_screen(rule.screen))


_COMPILED: tuple[_Compiled, ...] = tuple(_compile(r) for r in RULES)
_BY_NAME = {c.rule.name: c for c in _COMPILED}
_WHOLE_TEXT = _BY_NAME["private-key"]  # the one rule that spans lines


def _shortest(pattern: str) -> int:
    """The fewest characters a match can have (the parser's own bound; 0 if it cannot say)."""
    try:
        return int(re._parser.parse(pattern).getwidth()[0])  # type: ignore[attr-defined]
    except Exception:  # an optimisation only: without the bound every rule simply runs
        return 0


_CHAR_BITS = (("@", 1), (":", 2), ("=", 4), (".", 8), ("-", 16), ("_", 32))
_FEATURE_BITS = {char: bit for char, bit in _CHAR_BITS} | {"upper": 64, "digit": 128, "sep": 256}
_COLON_OR_EQUALS = 2 | 4


def _needs_mask(needs: tuple[str, ...]) -> int:
    mask = 0
    for need in needs:
        mask |= _FEATURE_BITS[need]
    return mask


_PLAN = tuple(
    (
        c,
        c.rule.hints,
        c.rule.hints_lower,
        c.screen,
        c.rule.lower,
        _shortest(c.rule.pattern),
        _needs_mask(c.rule.needs),
    )
    for c in _COMPILED
    if c is not _WHOLE_TEXT
)
_BY_FEATURES: dict[int, tuple[tuple[int, Any], ...]] = {}
# Each literal hint filed under the first of these characters it contains (rare ones first).
_GATE_ORDER = "@J_-A:."


def _gates() -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    table: dict[str, list[tuple[str, int]]] = {}
    for index, (_, hints, *_) in enumerate(_PLAN):
        for hint in hints:
            gate = next((c for c in _GATE_ORDER if c in hint), hint)
            table.setdefault(gate, []).append((hint, index))
    return tuple((gate, tuple(entries)) for gate, entries in table.items())


_GATES = _gates()
_cache: dict[str, str] = {}
_previous: dict[str, str] = {}


def apply_rule(name: str, text: str) -> str:
    """One rule alone (for the rule table's own examples)."""
    compiled = _BY_NAME[name]
    return compiled.apply(text, text.lower() if compiled.rule.lower else text)


def _lowercase(text: str) -> str:
    lowered = text.lower()
    # Spans found in the lowercase copy are replaced in the original: keep the lengths equal.
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


class _Features:
    """What the cheap preconditions need of one line, each computed at most once."""

    __slots__ = ("_digits", "_dotted", "_raw", "_run", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._raw: bytes | None = None
        self._run = -1
        self._digits: bytes | None = None
        self._dotted = -1

    def _bytes(self) -> bytes:
        if self._raw is None:
            self._raw = self._text.encode("utf-8", "surrogatepass")
        return self._raw

    def screened(self, kind: str, arg: int) -> bool:
        if kind == "run":  # is there an unbroken run of at least ``arg`` token characters?
            if self._run < 0:
                runs = self._bytes().translate(_RUN_BYTES)
                self._run = 40 if b"a" * 40 in runs else 24 if b"a" * 24 in runs else 0
            return self._run >= arg
        if kind == "digits":
            if self._digits is None:
                self._digits = self._bytes().translate(_DIGIT_RUNS, _CARD_SEPARATORS)
            return b"0" * arg in self._digits
        if kind == "ipv4":  # three dots, each after a digit
            if self._dotted < 0:
                self._dotted = self._bytes().translate(_DIGIT_SKELETON).count(b"0.")
            return self._dotted >= 3
        return "::" in self._text or self._text.count(":") >= 7  # colons: IPv6


def _hinted(text: str) -> set[int]:
    """The rules (by position in the plan) one of whose literal hints occurs in ``text``: a few
    gate characters first, so most hints are never searched for."""
    found: set[int] = set()
    for gate, entries in _GATES:
        if gate in text:
            for hint, index in entries:
                if index not in found and hint in text:
                    found.add(index)
    return found


def _features(text: str, lower: str) -> int:
    """Which of the ``needs`` features the line has, as bits."""
    mask = 0
    for char, bit in _CHAR_BITS:
        if char in text:
            mask |= bit
    if mask & _COLON_OR_EQUALS:
        mask |= _FEATURE_BITS["sep"]
    if text != lower:
        mask |= _FEATURE_BITS["upper"]
    if _DIGIT.search(text):
        mask |= _FEATURE_BITS["digit"]
    return mask


def _rules_for(mask: int) -> tuple[tuple[int, Any], ...]:
    """The plan's rules whose needs the line meets (computed once per combination)."""
    found = _BY_FEATURES.get(mask)
    if found is None:
        found = tuple((i, entry) for i, entry in enumerate(_PLAN) if entry[6] & ~mask == 0)
        _BY_FEATURES[mask] = found
    return found


def _redact_line(text: str) -> str:
    # A plain loop, no generator per rule: this runs for every line not seen before.
    lower = _lowercase(text)
    rules = _rules_for(_features(text, lower))
    hinted: set[int] | None = None
    features: _Features | None = None
    size = len(text)
    for index, (compiled, hints, hints_lower, screen, on_lower, shortest, _) in rules:
        if size < shortest:
            continue
        if hints:
            if hinted is None:
                hinted = _hinted(text)
            if index not in hinted:
                continue
        if hints_lower:
            for hint in hints_lower:
                if hint in lower:
                    break
            else:
                continue
        if screen is not None:
            if features is None:
                features = _Features(text)
            if not features.screened(*screen):
                continue
        out = compiled.apply(text, lower if on_lower else text)
        if out is not text:
            # Later rules read the new text. Its secrets were in the old text, with the
            # features they need, so the rule list chosen from the old text still covers them.
            text, lower, size = out, _lowercase(out), len(out)
            hinted = features = None
    return text


def _cached_line(text: str) -> str:
    # The shortest shapes: "::1", "a@b.io", "pwd=x"; anything else needs eight characters.
    if len(text) < 8 and not ("@" in text or ":" in text or "=" in text):
        return text
    if len(text) > MAX_CACHED_LINE or not LINE_CACHE_SIZE:
        return _redact_line(text)
    global _cache, _previous
    found = _cache.get(text)
    if found is None:
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
    """Remember up to ``size`` lines (0: none) and forget the ones remembered; returns the old
    size. For benchmarks and tests: the results are the same either way."""
    global LINE_CACHE_SIZE
    old, LINE_CACHE_SIZE = LINE_CACHE_SIZE, size
    _cache.clear()
    _previous.clear()
    return old


def redact(text: str) -> str:
    """``text`` with every secret the rules recognise replaced by its typed placeholder."""
    if len(text) < 3:
        return text
    if "\n" not in text:
        # A remembered line is already its full redaction: the PEM rule, applied to one line,
        # is part of what was remembered (a line left after it has no PEM header).
        hit = _cache.get(text)
        if hit is not None:
            return hit
    if "PRIVATE KEY-----" in text:
        text = _WHOLE_TEXT.apply(text, text)
    if "\n" not in text:
        return _cached_line(text)
    if not LINE_CACHE_SIZE:
        return "\n".join([_redact_line(line) for line in text.split("\n")])
    get = _cache.get  # the current generation; _cached_line looks in the older one
    return "\n".join(
        [hit if (hit := get(line)) is not None else _cached_line(line) for line in text.split("\n")]
    )


def is_secret_key(key: str) -> bool:
    """Whether an attribute named ``key`` holds a secret (``db.password``, ``X-Api-Key``…)."""
    return key.lower().endswith(SECRET_KEY_WORDS)
