"""The proof bundle and the rule that binds a submitted bundle to a quest.

The bundle's digest is ``canonical_digest(bundle.model_dump(mode="json"))``; see
``ephyra.core.canonical`` for the exact serialisation. A bundle serialises as it was submitted:
the fields it was given, and no others (an optional field left out is not filled in with its
default), so the digest is that of the JSON the submitter hashed. Numbers and booleans are taken
as they are (strict): a ``"1"`` or a ``1.0`` for a count, or a ``"yes"`` for ``passed``, is
refused rather than converted to a value whose JSON differs from what was hashed.

Binding proves the bundle is the one submitted for this quest, revision, risk, base and head; it
does not attest that the commands ran — that is the runner's and the ledger's business.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from ephyra.core.canonical import canonical_digest

Sha = Annotated[str, Field(min_length=4, max_length=64, pattern=r"^[0-9a-f]+$")]


class _AsSubmitted(BaseModel):
    """A model that serialises only the fields it was given (``model_fields_set``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_serializer(mode="wrap")
    def _as_submitted(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        given = self.model_fields_set
        return {name: value for name, value in handler(self).items() if name in given}


class CheckResult(_AsSubmitted):
    name: str = Field(min_length=1, max_length=100)
    command: str = Field(default="", max_length=2000)
    exit_code: int = Field(default=0, strict=True)
    passed: bool = Field(strict=True)
    duration_ms: int = Field(default=0, ge=0, strict=True)
    output_digest: str = ""
    # What Ephyra's own proof records beside the verdict (``work.proof``); a bundle made
    # elsewhere may leave them out, and then they are not part of its JSON or its digest.
    # ``flaky``: failed, then passed when run once more; ``passed`` says whether it counted.
    result: Literal["passed", "failed", "flaky"] | None = None
    attempts: int = Field(default=1, ge=1, le=10, strict=True)
    excerpt: str = Field(default="", max_length=4000)
    note: str = Field(default="", max_length=2000)
    # ``tests``: the tests failing at the base and at the head (node ids), when the base
    # already had failures; ``probe``: each probe run, as "<name>: passed|failed".
    base_failures: tuple[Annotated[str, Field(max_length=500)], ...] = Field(
        default=(), max_length=200
    )
    head_failures: tuple[Annotated[str, Field(max_length=500)], ...] = Field(
        default=(), max_length=200
    )
    probes: tuple[Annotated[str, Field(max_length=600)], ...] = Field(default=(), max_length=200)


class ProofBundle(_AsSubmitted):
    quest: str
    revision: int = Field(ge=1, strict=True)
    risk: str
    base: Sha
    head: Sha
    checks: tuple[CheckResult, ...] = ()
    runner: str = Field(default="", max_length=20)

    def digest(self) -> str:
        return canonical_digest(self.model_dump(mode="json"))


def binding_problem(
    bundle: ProofBundle,
    digest: str,
    *,
    quest: str,
    revision: int,
    risk: str | None,
    base: str | None,
    head: str | None,
    required_checks: tuple[str, ...],
) -> str | None:
    """Why this bundle cannot complete proof for the quest, or None when it can."""
    if head is None:
        return "proof cannot complete: no patch head is recorded"
    mismatches = [
        (name, got, want)
        for name, got, want in (
            ("quest", bundle.quest, quest),
            ("revision", bundle.revision, revision),
            ("risk", bundle.risk, risk),
            ("base", bundle.base, base),
            ("head", bundle.head, head),
        )
        if got != want
    ]
    if mismatches:
        name, got, want = mismatches[0]
        return f"proof bundle {name} is {got!r} but the quest's is {want!r}"
    if digest != bundle.digest():
        return "proof digest does not match the canonical SHA-256 of the bundle"
    by_name = {check.name: check for check in bundle.checks}
    for name in required_checks:
        check = by_name.get(name)
        if check is None:
            return f"proof bundle lacks the required check {name!r}"
        if not check.passed:
            return f"required check {name!r} failed: report proof_failed instead"
    return None


def stale_problem(
    bundle: ProofBundle, *, quest: str, revision: int, base: str | None, head: str | None
) -> str | None:
    """Why a failed proof's bundle is not about the quest as it is now (another revision,
    head or base: the proof outlived what it was asked for), or None."""
    for name, got, want in (
        ("quest", bundle.quest, quest),
        ("revision", bundle.revision, revision),
        ("base", bundle.base, base),
        ("head", bundle.head, head),
    ):
        if got != want:
            return f"proof bundle {name} is {got!r} but the quest's is {want!r}"
    return None
