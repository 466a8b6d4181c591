"""Redaction by its definition, with none of the speed work: what
``ephyra.redaction.redact.redact(text)`` must return (``test_redaction_reference.py`` holds the two
equal).

1. Every default-ignorable character is dropped (``DEFAULT_IGNORABLE``: Unicode's list).
2. Every rule of ``rules.py``, in table order, is applied over the whole text; after any change,
   from the first rule again; until no rule changes the text.

Applying a rule: each match of its pattern, left to right and not overlapping (``re.finditer``;
a ``lower`` rule's pattern reads the text lowercased, only its ASCII letters where lowering all
would change the length); the secret is the match's ``secret…`` group that took part, else the
whole match; it becomes the rule's placeholder unless it is empty, already a placeholder, or
fails the rule's check (``CHECKS``, part of each rule's definition).

``redact.py`` works line by line and bounds the changes a line may take: a line still changing
after ``MAX_CHANGES`` of them is replaced whole by ``WITHHELD``. This definition has no bound;
the tests that build such lines say what they expect.
"""

from __future__ import annotations

import re

from ephyra.redaction.redact import CHECKS
from ephyra.redaction.rules import RULES, Rule

# Default_Ignorable_Code_Point, from Unicode's DerivedCoreProperties.txt.
DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD),  # SOFT HYPHEN
    (0x034F, 0x034F),  # COMBINING GRAPHEME JOINER
    (0x061C, 0x061C),  # ARABIC LETTER MARK
    (0x115F, 0x1160),  # HANGUL CHOSEONG FILLER..HANGUL JUNGSEONG FILLER
    (0x17B4, 0x17B5),  # KHMER VOWEL INHERENT AQ..KHMER VOWEL INHERENT AA
    (0x180B, 0x180D),  # MONGOLIAN FREE VARIATION SELECTOR ONE..THREE
    (0x180E, 0x180E),  # MONGOLIAN VOWEL SEPARATOR
    (0x180F, 0x180F),  # MONGOLIAN FREE VARIATION SELECTOR FOUR
    (0x200B, 0x200F),  # ZERO WIDTH SPACE..RIGHT-TO-LEFT MARK
    (0x202A, 0x202E),  # LEFT-TO-RIGHT EMBEDDING..RIGHT-TO-LEFT OVERRIDE
    (0x2060, 0x2064),  # WORD JOINER..INVISIBLE PLUS
    (0x2065, 0x2065),  # <reserved-2065>
    (0x2066, 0x206F),  # LEFT-TO-RIGHT ISOLATE..NOMINAL DIGIT SHAPES
    (0x3164, 0x3164),  # HANGUL FILLER
    (0xFE00, 0xFE0F),  # VARIATION SELECTOR-1..VARIATION SELECTOR-16
    (0xFEFF, 0xFEFF),  # ZERO WIDTH NO-BREAK SPACE
    (0xFFA0, 0xFFA0),  # HALFWIDTH HANGUL FILLER
    (0xFFF0, 0xFFF8),  # <reserved-FFF0>..<reserved-FFF8>
    (0x1BCA0, 0x1BCA3),  # SHORTHAND FORMAT LETTER OVERLAP..SHORTHAND FORMAT UP STEP
    (0x1D173, 0x1D17A),  # MUSICAL SYMBOL BEGIN BEAM..MUSICAL SYMBOL END PHRASE
    (0xE0000, 0xE0FFF),  # LANGUAGE TAG, TAG SPACE..CANCEL TAG, VARIATION SELECTOR-17..256, reserved
)


def is_invisible(char: str) -> bool:
    return any(low <= ord(char) <= high for low, high in DEFAULT_IGNORABLE)


def lowered(text: str) -> str:
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c.lower() if c.isascii() else c for c in text)


def apply(rule: Rule, text: str) -> str:
    """One pass of ``rule`` over ``text``."""
    pieces, last = [], 0
    for match in re.finditer(rule.pattern, lowered(text) if rule.lower else text):
        groups = [g for g in match.re.groupindex if g.startswith("secret") and match[g] is not None]
        start, end = match.span(groups[0] if groups else 0)
        secret = text[start:end]
        if not secret or secret.startswith("[redacted:"):
            continue
        if rule.check and not CHECKS[rule.check](text, match, secret):
            continue
        pieces += [text[last:start], rule.placeholder]
        last = end
    return "".join(pieces) + text[last:]


def redact(text: str) -> str:
    text = "".join(c for c in text if not is_invisible(c))
    while True:
        for rule in RULES:
            changed = apply(rule, text)
            if changed != text:
                text = changed
                break
        else:
            return text
