"""Each forge's proof of origin, checked against vectors the forges publish."""

from __future__ import annotations

import pytest

from ephyra.webhooks import signatures

# GitHub's documented example ("Validating webhook deliveries").
GITHUB_SECRET = b"It's a Secret to Everybody"
GITHUB_BODY = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_githubs_published_example_verifies():
    assert signatures.verify_github(GITHUB_SECRET, GITHUB_BODY, GITHUB_SIGNATURE)


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        GITHUB_SIGNATURE[7:],  # the bare digest without its scheme
        "sha1=" + GITHUB_SIGNATURE[7:],
        GITHUB_SIGNATURE[:-1] + "0",
        GITHUB_SIGNATURE.upper(),
        GITHUB_SIGNATURE + "00",
        "sha256=\u00e9\u00e9",
    ],
)
def test_a_github_signature_that_differs_in_any_way_is_refused(header):
    assert not signatures.verify_github(GITHUB_SECRET, GITHUB_BODY, header)


def test_a_github_signature_of_another_body_or_secret_is_refused():
    assert not signatures.verify_github(GITHUB_SECRET, GITHUB_BODY + b" ", GITHUB_SIGNATURE)
    assert not signatures.verify_github(b"another", GITHUB_BODY, GITHUB_SIGNATURE)
    assert not signatures.verify_github(b"", GITHUB_BODY, GITHUB_SIGNATURE)


def test_gitea_signs_with_the_bare_hex_digest():
    digest = GITHUB_SIGNATURE[7:]
    assert signatures.verify_gitea(GITHUB_SECRET, GITHUB_BODY, digest)
    assert not signatures.verify_gitea(GITHUB_SECRET, GITHUB_BODY, GITHUB_SIGNATURE)
    assert not signatures.verify_gitea(GITHUB_SECRET, GITHUB_BODY, None)


def test_a_gitlab_token_is_compared_whole():
    assert signatures.verify_token("t0ken", "t0ken")
    for given in (None, "", "t0ke", "t0ken ", "T0KEN"):
        assert not signatures.verify_token("t0ken", given)


def test_a_hashed_gitlab_token_verifies_without_the_token_being_stored():
    stored = signatures.hash_token("t0ken-t0ken", b"\x01" * 16)
    assert "t0ken" not in stored
    assert signatures.is_token_hash(stored)
    assert signatures.verify_token_hash(stored, "t0ken-t0ken")
    assert not signatures.verify_token_hash(stored, "t0ken-t0keN")
    assert not signatures.verify_token_hash(stored, None)
    # Another salt, another digest: equal tokens of two hooks do not show as equal rows.
    assert signatures.hash_token("t0ken-t0ken", b"\x02" * 16) != stored


@pytest.mark.parametrize("stored", ["", "md5$00$11", "sha256$zz$" + "0" * 64, "sha256$"])
def test_a_malformed_token_digest_verifies_nothing(stored):
    assert not signatures.verify_token_hash(stored, "anything")


def test_a_short_salt_is_refused():
    with pytest.raises(ValueError, match="at least 16 bytes"):
        signatures.hash_token("t", b"short")
