"""Speed work must not change what ingest computes: a fixed sample's fingerprints, redacted
texts, frames and counts are pinned (``pinned.py`` says what the sample holds and how the
outputs were written), from both wire formats, with the line cache cold, warm and off."""

from __future__ import annotations

import json

import pytest

from ephyra.redaction import redact as redact_module
from tests.telemetry.pinned import OUTPUT, compute_output, load_input

SAMPLE = load_input()
PINNED = json.loads(OUTPUT.read_text())


def first_difference(got: object, want: object, where: str = "") -> str | None:
    if type(got) is not type(want):
        return f"{where}: {got!r:.200} != {want!r:.200}"
    if isinstance(want, dict):
        assert isinstance(got, dict)
        if got.keys() != want.keys():
            return f"{where}: keys {sorted(got.keys() ^ want.keys())} differ"
        return next(
            (d for k in want if (d := first_difference(got[k], want[k], f"{where}.{k}"))), None
        )
    if isinstance(want, list):
        assert isinstance(got, list)
        if len(got) != len(want):
            return f"{where}: {len(got)} items, pinned {len(want)}"
        return next(
            (d for i, (g, w) in enumerate(zip(got, want, strict=True))
             if (d := first_difference(g, w, f"{where}[{i}]"))),
            None,
        )  # fmt: skip
    return None if got == want else f"{where}: {got!r:.300} != pinned {want!r:.300}"


@pytest.fixture
def cold_cache():
    saved = redact_module.set_line_cache_size(redact_module.LINE_CACHE_SIZE)  # forget all
    yield
    redact_module.set_line_cache_size(saved)


def test_the_sample_covers_what_it_claims():
    logs = PINNED["logs/default"]
    languages = {c["language"] for c in logs["candidates"]}
    assert languages == {"python", "java", "javascript", "go", ""}
    assert logs["dropped"] == 1 and logs["rejected"] == 2
    assert len(PINNED["traces/default"]["candidates"]) == 10
    assert sum("[redacted:" in text for text in PINNED["redact"]) > 200
    for key, section in PINNED.items():
        if key != "redact":
            assert section["json_same_candidates"] is True, key


@pytest.mark.parametrize("cache", ["cold", "warm", "off"])
def test_candidates_and_redactions_are_byte_for_byte_the_pinned_ones(cache, cold_cache):
    if cache == "warm":
        compute_output(SAMPLE)
    saved = redact_module.set_line_cache_size(0) if cache == "off" else None
    try:
        got = compute_output(SAMPLE)
    finally:
        if saved is not None:
            redact_module.set_line_cache_size(saved)
    assert first_difference(got, PINNED) is None
