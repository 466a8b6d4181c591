"""Redaction by its definition, with none of the speed work: what
``ephyra.ingest.redact.redact(text)`` must return (``test_redaction_reference.py`` holds the two
equal).

Every rule of ``rules.py``, in table order, is applied over the whole text; after any change,
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

from ephyra.ingest.redact import CHECKS
from ephyra.ingest.rules import RULES, Rule


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
    while True:
        for rule in RULES:
            changed = apply(rule, text)
            if changed != text:
                text = changed
                break
        else:
            return text
