"""Redaction: every text that leaves the ingest package has been through ``redact``.

What ``redact(text)`` returns, by definition:

1. **Normalised**: every character in ``INVISIBLE`` is dropped. They render as nothing (a
   zero-width space or joiner, a BOM, a soft hyphen, a bidirectional control, a variation
   selector), so a secret with one inside looks whole to a reader while no pattern matches it.
   The rules read the normalised text, and it is what comes back, so what callers store.
2. **Redacted**: the rules of ``rules.py``, in table order, each over the whole text, replace
   what they find with their placeholder; after any change, from the first rule again; until no
   rule changes the text.

``tests/telemetry/redaction_reference.py`` is that definition and nothing else; the tests hold this
module equal to it on fuzzed and pinned texts. It is idempotent: a placeholder is never taken
for a secret, so ``redact(redact(t)) == redact(t)``. Attribute maps are also redacted by key name
(``is_secret_key``): the value of ``db.password`` is a secret whatever it looks like.

What this module adds is speed, and none of it changes the result:

- **Line by line.** Only the private-key rule matches across a newline; every other pattern
  excludes it, and their lookarounds see a newline as they see the text's ends. So that rule runs
  once over the whole text first (no later replacement can make its header: a placeholder holds
  no dash and no capital letter), then each line goes to its own fixed point.
- **Rules that cannot match are not run.** ``_can_change`` names, for each rule, something
  every match holds (a substring, a run, enough digits); a line without it is not scanned by
  the rule. No such test tells one digit from another, so the rules a line wakes are remembered
  by its skeleton (its ASCII digits made 0). Most lines wake no rule.
- **Lines are remembered.** A line's redaction depends on the line alone; the last
  ``LINE_CACHE_SIZE`` lines are remembered (in memory, never stored): a stack trace's frame lines
  recur in every occurrence of an error.

One bound: a line still changing after ``MAX_CHANGES`` changes (a change is one rule's pass that
replaced something) is replaced whole by ``WITHHELD``. A line settles after about one change per
kind of secret it holds; secrets glued one behind another, each found only once the one before
is a placeholder, take one change each, and without the bound such a line would cost time
quadratic in its length. Withholding the line keeps nothing of it.
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
from itertools import compress

from ephyra.redaction.rules import RULES, SECRET_KEY_WORDS, Rule

SECRET_PLACEHOLDER = "[redacted:secret]"
WITHHELD = "[redacted:line]"
# A line settles after about one change per kind of secret it holds, at most one per rule; twice
# that leaves room for as many secrets glued behind others.
MAX_CHANGES = 2 * len(RULES)
LINE_CACHE_SIZE = 32_768  # lines remembered per generation (raw → redacted, in memory only)
MAX_CACHED_LINE = 512

# Unicode's default-ignorable code points (DerivedCoreProperties.txt), the characters a renderer
# shows as nothing: U+00AD soft hyphen, U+034F combining grapheme joiner, U+061C, U+200E/F,
# U+202A-E and U+2066-9 bidirectional marks, U+115F/60, U+3164 and U+FFA0 Hangul fillers,
# U+17B4/5, U+180B-F Mongolian selectors and vowel separator, U+200B-D zero-width space and
# joiners, U+2060-4 word joiner and invisible operators, U+206A-F, U+FE00-F and U+E0100-EF
# variation selectors, U+FEFF BOM, U+1BCA0-3, U+1D173-A, the tag characters U+E0000-7F, and
# the code points reserved for more of the same.
INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)

_WORDS = re.compile(r"[a-z]{4,}|[A-Z][a-z]{3,}")
_SEGMENTS = re.compile(r"[-_/]")
_UPPER = re.compile(r"[A-Z]")
_LOWER = re.compile(r"[a-z]")
_DIGIT = re.compile(r"[0-9]")
_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def normalise(text: str) -> str:
    """``text`` without the characters in ``INVISIBLE`` (none is ASCII)."""
    return text if text.isascii() else INVISIBLE.sub("", text)


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


# -- one rule -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Compiled:
    rule: Rule
    regex: re.Pattern[str]
    # The groups that may hold the secret, in order; (0,) for the whole match. The first group
    # that took part in a match is the secret.
    secret_groups: tuple[int | str, ...]
    check: Callable[[str, re.Match[str], str], bool] | None

    def apply(self, text: str, lower: str) -> str:
        """``text`` with every secret the pattern finds replaced by the placeholder (a
        ``lower`` rule's pattern reads ``lower``, the lowercase copy of ``text``)."""
        groups, check, pieces, last = self.secret_groups, self.check, [], 0
        for match in self.regex.finditer(lower if self.rule.lower else text):
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
            pieces.append(text[last:lo])
            pieces.append(self.rule.placeholder)
            last = hi
        if not pieces:
            return text
        pieces.append(text[last:])
        return "".join(pieces)


def _compile(rule: Rule) -> Compiled:
    regex = re.compile(rule.pattern)
    groups = tuple(sorted(n for n in regex.groupindex if n.startswith("secret")))
    check = CHECKS[rule.check] if rule.check else None
    return Compiled(rule, regex, groups or (0,), check)


COMPILED: tuple[Compiled, ...] = tuple(_compile(r) for r in RULES)
_BY_NAME = {c.rule.name: c for c in COMPILED}
_PRIVATE_KEY = _BY_NAME["private-key"]  # the one rule that spans lines
_LINE_RULES = tuple(c for c in COMPILED if c is not _PRIVATE_KEY)


def lowercase(text: str) -> str:
    """``text.lower()``, or only its ASCII letters lowered where that would change the length
    (the spans a ``lower`` rule finds in it are replaced in ``text``)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def apply_rule(name: str, text: str) -> str:
    """One rule alone, once (for the rule table's own examples)."""
    return _BY_NAME[name].apply(text, lowercase(text))


# -- which rules can change a line ----------------------------------------------------------

# Weaker forms of the patterns that have many prefixes or key words (rules.py).
_AWS_PREFIX = re.compile("AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA")
_GITHUB_PREFIX = re.compile("gh[pousr]_|github_pat_")
_GITLAB_PREFIX = re.compile("gl(?:pat|dt|rt)-")
_KEY_WORD = re.compile("pass|pwd|secret|token|key|authorization|cookie|session|credential")
# A line's skeleton: its UTF-8 with every ASCII digit a 0, read back a byte a character.
_SKELETON = bytes(0x30 if 0x30 <= i <= 0x39 else i for i in range(256))
# Every byte of [A-Za-z0-9+/=_-] an "a", any other a space (a non-ASCII character is spaces).
_RUN_BYTES = bytes(
    0x61 if chr(i) in string.ascii_letters + string.digits + "+/=_-" else 0x20 for i in range(256)
)


def _can_change(line: str, lower: str, skeleton: str) -> tuple[Compiled, ...]:
    """The line rules that can change ``line``, in table order. For each rule, something every
    match of its pattern that passes its check holds; a line without it cannot be changed by
    the rule (``lower`` is the line's lowercase copy, ``skeleton`` its skeleton). No test tells
    one digit from another, so the answer is the same for every line of this skeleton."""
    # The secret of the two random-run rules is such a run, and their checks want a capital
    # letter and a digit in it.
    mixed = "0" in skeleton and skeleton != skeleton.lower()
    runs = skeleton.encode("latin-1").translate(_RUN_BYTES).decode("latin-1") if mixed else ""
    wakes = (
        "eyJ" in line,  # jwt
        "A" in line and _AWS_PREFIX.search(line) is not None,  # aws-access-key-id
        "_" in line and _GITHUB_PREFIX.search(line) is not None,  # github-token
        "-" in line and _GITLAB_PREFIX.search(line) is not None,  # gitlab-token
        "xox" in line or "xapp-" in line,  # slack-token
        "hooks.slack.com/" in line,  # slack-webhook
        "sk-ant-" in line,  # anthropic-key
        "sk-" in line,  # openai-key
        "k_live_" in line or "k_test_" in line,  # stripe-key
        "AIza" in line,  # google-api-key
        "://" in line and "@" in line,  # url-credentials
        "bearer" in lower,  # bearer-token
        "basic" in lower,  # basic-auth
        (":" in line or "=" in line) and _KEY_WORD.search(lower) is not None,  # secret
        "a" * 40 in runs,  # aws-secret-key
        "@" in line and "." in line,  # email
        # credit-card: 13 to 19 digits, single spaces or dashes between
        skeleton.count("0") >= 13 and "0" * 13 in skeleton.replace(" ", "").replace("-", ""),
        "::" in line or line.count(":") >= 7,  # ipv6: its check wants "::" or seven colons
        skeleton.count("0.") >= 3,  # ipv4: three octets each end with a digit, then a dot
        "a" * 24 in runs,  # high-entropy
    )
    return tuple(compress(_LINE_RULES, wakes))


# Remembered by skeleton: the same message with another id, port, line number or address is
# looked at once (in memory only, like the lines).
_PLANS: dict[str, tuple[Compiled, ...]] = {}
PLAN_CACHE_SIZE = 8192


def _plan(line: str, lower: str) -> tuple[Compiled, ...]:
    """``_can_change(line, lower, its skeleton)``, remembered."""
    skeleton = line.encode("utf-8", "surrogatepass").translate(_SKELETON).decode("latin-1")
    plan = _PLANS.get(skeleton)
    if plan is None:
        plan = _can_change(line, lower, skeleton)
        if LINE_CACHE_SIZE:
            if len(_PLANS) >= PLAN_CACHE_SIZE:
                _PLANS.clear()
            _PLANS[skeleton] = plan
    return plan


# -- a line ---------------------------------------------------------------------------------


def _redact_line(line: str, max_changes: int = MAX_CHANGES) -> str:
    """The line rules, in order, from the first again after any change, until none changes
    the line; ``WITHHELD`` if it still changes after ``max_changes`` of them."""
    lower = lowercase(line)
    todo = _plan(line, lower)
    changes = i = 0
    while i < len(todo):
        rule = todo[i]
        i += 1
        out = rule.apply(line, lower)
        if out is line:
            continue
        if changes == max_changes:
            return WITHHELD
        changes += 1
        line, lower = out, lowercase(out)
        todo, i = _plan(line, lower), 0
    return line


# Two generations: the lines still in use move to the current one as they are met again, the
# one-off messages and ids go with the older one.
_cache: dict[str, str] = {}
_previous: dict[str, str] = {}


def _cached_line(line: str) -> str:
    """``_redact_line(line)``, remembered."""
    global _cache, _previous
    found = _cache.get(line)
    if found is not None:
        return found
    if len(line) > MAX_CACHED_LINE or not LINE_CACHE_SIZE:
        return _redact_line(line)
    found = _previous.get(line)
    if found is None:
        found = _redact_line(line)
    if len(_cache) >= LINE_CACHE_SIZE:
        _previous, _cache = _cache, {}
    _cache[line] = found
    return found


def set_line_cache_size(size: int) -> int:
    """Remember up to ``size`` lines (0: none, and no plans either) and forget the lines and
    plans remembered; returns the old size. For benchmarks and tests: results are the same."""
    global LINE_CACHE_SIZE
    old, LINE_CACHE_SIZE = LINE_CACHE_SIZE, size
    _cache.clear()
    _previous.clear()
    _PLANS.clear()
    return old


# -- texts ----------------------------------------------------------------------------------


def _whole_text_rules(text: str) -> str:
    """``text`` normalised, and the private-key rule applied to it (it spans lines)."""
    text = normalise(text)
    return _PRIVATE_KEY.apply(text, text) if "PRIVATE KEY" in text else text  # its hint


def redact_lines(text: str) -> list[str]:
    """``redact(text).split("\\n")``, without the join and the split (the stack parser reads
    the lines)."""
    return list(map(_cached_line, _whole_text_rules(text).split("\n")))


def redact(text: str) -> str:
    """``text`` normalised, with every secret the rules recognise replaced by its typed
    placeholder."""
    found = _cache.get(text)  # most texts are one line, and most lines were seen before
    if found is not None:
        return found
    text = _whole_text_rules(text)
    if "\n" not in text:
        return _cached_line(text)
    return "\n".join(map(_cached_line, text.split("\n")))


def is_secret_key(key: str) -> bool:
    """Whether an attribute named ``key`` holds a secret (``db.password``, ``X-Api-Key``…)."""
    return normalise(key).lower().endswith(SECRET_KEY_WORDS)
