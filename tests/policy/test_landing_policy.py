"""The policy's landing section: a style and its allowed fallbacks, errors with their line."""

from __future__ import annotations

import pytest

from ephyra.policy import PolicyError, default_policy, parse_policy


def test_by_default_only_a_fast_forward_lands():
    landing = default_policy().landing
    assert (landing.style, landing.allow, landing.styles()) == (
        "fast-forward",
        (),
        ("fast-forward",),
    )


def test_a_policy_names_a_style_and_the_fallbacks_tried_after_it_in_order():
    policy = parse_policy("version: 1\nlanding:\n  style: fast-forward\n  allow: [rebase, merge]\n")
    assert policy.landing.styles() == ("fast-forward", "rebase", "merge")
    assert parse_policy("version: 1\nlanding: {style: merge}\n").landing.styles() == ("merge",)


def test_an_unknown_style_is_refused_with_its_field_and_line():
    with pytest.raises(PolicyError) as raised:
        parse_policy("version: 1\nlanding:\n  style: squash\n  allow: [merge, force]\n", "p.yaml")
    assert raised.value.problems == [
        ("landing.style", 3, "Input should be 'fast-forward', 'merge' or 'rebase'"),
        ("landing.allow.1", 4, "Input should be 'merge' or 'rebase'"),
    ]
    assert "p.yaml:3: landing.style: Input should be" in str(raised.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("  style: merge\n  allow: [merge]\n", "allow lists merge, which is already the style"),
        ("  allow: [rebase, rebase]\n", "allow lists rebase twice"),
    ],
)
def test_a_style_listed_twice_is_refused_with_the_sections_line(text, message):
    with pytest.raises(PolicyError) as raised:
        parse_policy(f"version: 1\nwatch:\n  minutes: 5\nlanding:\n{text}")
    assert raised.value.problems == [("landing", 4, f"Value error, {message}")]
