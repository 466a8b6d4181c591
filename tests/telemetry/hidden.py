"""Secrets written the ways that once got past redaction (issue 13, defect 16: found by sending
crafted requests to a live server), and the pieces of each that nothing stored may hold."""

from __future__ import annotations

AWS_KEY = "AKIAZ7QX3MPLE4KEYS2Q"
INVISIBLE = {
    "zero-width space": "\u200b",
    "zero-width joiner": "\u200d",
    "soft hyphen": "\u00ad",
    "word joiner": "\u2060",
    "byte order mark": "\ufeff",
    "right-to-left override": "\u202e",
}
URL_USER = "deployer-ann"
PGP_BODY = "lQOYBGXr1x0BCADQm4K7Z2J0c9wVt1kq8oXhN3pRmZ4"
PGP = (
    f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{PGP_BODY}\n=Zx8Q\n"
    "-----END PGP PRIVATE KEY BLOCK-----"
)


def carriers() -> dict[str, str]:
    """What each way of hiding a secret looks like in a text a person or a program wrote."""
    out = {
        f"an AWS key with a {name} inside": f"the key {AWS_KEY[:8]}{char}{AWS_KEY[8:]} leaked"
        for name, char in INVISIBLE.items()
    }
    for char in "/#?":
        out[f"a URL password holding {char}"] = (
            f"clone https://{URL_USER}:Tr0ub{char}4dor-x@git.example.com/shop.git failed"
        )
    out["an OpenPGP private key block"] = f"gpg: importing\n{PGP}\ngpg: done"
    return out


# What must not be found: each secret whole and its pieces, the URL's user and password parts.
NEEDLES = (AWS_KEY, AWS_KEY[:8], AWS_KEY[8:], URL_USER, "Tr0ub", "4dor-x", PGP_BODY, "=Zx8Q")
PLACEHOLDERS = (
    "[redacted:aws-access-key-id]",
    "[redacted:url-credentials]",
    "[redacted:private-key]",
)


def leaks(values: list[tuple[str, str]]) -> list[str]:
    """(where, text) pairs → what was found where: a needle, or an invisible character (what is
    stored is the normalised text)."""
    found = [
        f"{needle!r} in {where}" for where, text in values for needle in NEEDLES if needle in text
    ]
    found += [
        f"{name} in {where}"
        for where, text in values
        for name, char in INVISIBLE.items()
        if char in text
    ]
    return found
