"""Writes the example event files in this folder. Run: python docs/examples/make_examples.py

The files are data a person can read and edit; this script exists so that the proof bundle
digests in them are computed, not typed, and so a test can check the files are current.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ephyra.core.proof import CheckResult, ProofBundle

HERE = Path(__file__).resolve().parent
T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
BASE, HEAD, HEAD2, LANDED = "9f2c1e0" + "0" * 33, "4be1d7a" + "0" * 33, "77aa01c" + "0" * 33, (
    "c0ffee1" + "0" * 33
)


class Script:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.counter = 0
        self.at = T0

    def comment(self, text: str) -> None:
        self.lines.append(f"# {text}")

    def add(self, quest: str, type_: str, actor: str = "ephyra", **fields) -> None:
        self.counter += 1
        self.at += timedelta(minutes=3)
        event = {"id": f"e{self.counter:03d}", "quest": quest, "type": type_}
        event |= {"at": self.at.isoformat().replace("+00:00", "Z"), "actor": actor, **fields}
        self.lines.append(json.dumps(event, sort_keys=False))

    def proof(self, quest: str, revision: int, risk: str, head: str) -> None:
        bundle = ProofBundle(
            quest=quest,
            revision=revision,
            risk=risk,
            base=BASE,
            head=head,
            checks=(
                CheckResult(
                    name="tests",
                    command="pytest -q",
                    exit_code=0,
                    passed=True,
                    duration_ms=4210,
                    output_digest="",  # every field given: a bundle is hashed as submitted
                ),
            ),
        )
        self.add(
            quest, "proof_completed", bundle=bundle.model_dump(mode="json"), digest=bundle.digest()
        )

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def signal(sid: str, fingerprint: str, severity: str = "error", title: str = "") -> dict:
    return {"id": sid, "fingerprint": fingerprint, "severity": severity, "title": title}


def main_line() -> Script:
    s = Script()
    q = "checkout-500"
    s.comment("One quest from signal to closed, with one failed proof on the way.")
    s.add(q, "signal_sensed", signal=signal("sig-1", "fp-keyerror-cart", title="KeyError: 'sku'"))
    s.add(q, "triage_decided", route="auto_fix", risk="low", rule="errors in checkout")
    s.add(q, "research_started")
    s.add(q, "hypothesis_written", summary="cart.total() reads item['sku'] added in 4be1d7a")
    s.add(q, "checkpoint_decided", actor="ann", checkpoint="A", verdict="approve")
    s.add(q, "reproduction_recorded", probe="pytest tests/test_cart.py::test_total", plan="revert")
    s.add(q, "checkpoint_decided", actor="ann", checkpoint="B", verdict="approve")
    s.add(q, "patch_recorded", head=HEAD, base=BASE)
    s.add(q, "proof_failed", reason="test_total still fails on Python 3.11")
    s.add(q, "patch_recorded", head=HEAD, base=BASE)
    s.proof(q, 1, "low", HEAD)
    s.add(q, "checkpoint_decided", actor="ann", checkpoint="C", verdict="approve")
    s.add(q, "landed", commit=LANDED)
    s.add(q, "usage_recorded", source="agent:research", cost_micros=42_000, tokens=18_500)
    s.add(q, "watch_clean", summary="no KeyError in 30 minutes, error rate at baseline")
    s.add(q, "usage_recorded", source="runner", runner_seconds=95)
    return s


def claims_and_revisions() -> Script:
    s = Script()
    q = "search-timeout"
    s.comment("A review claimed at C, a human revision under the claim, proof again, approval.")
    s.add(q, "signal_sensed", signal=signal("sig-7", "fp-timeout-search", "fatal"))
    s.add(q, "triage_decided", route="auto_fix", risk="medium")
    s.add(q, "research_started")
    s.add(q, "hypothesis_written", summary="the new index is not used by the search query")
    s.add(q, "checkpoint_decided", actor="ann", checkpoint="A", verdict="approve")
    s.add(q, "reproduction_recorded", probe="pytest tests/test_search.py -k timeout")
    s.add(q, "checkpoint_decided", actor="ann", checkpoint="B", verdict="approve")
    s.add(q, "patch_recorded", head=HEAD, base=BASE)
    s.proof(q, 1, "medium", HEAD)
    s.add(q, "claimed", actor="bob")
    s.add(q, "comment_added", actor="ann", body="bob, the index name changed in 77aa01c")
    s.add(q, "human_revision", actor="bob", head=HEAD2)
    s.proof(q, 2, "medium", HEAD2)
    s.add(q, "checkpoint_decided", actor="bob", checkpoint="C", verdict="approve")
    s.add(q, "landed", commit=LANDED)
    s.add(q, "regression_observed", summary="p95 latency doubled after deploy")
    s.add(q, "rollback_confirmed", commit="dead000" + "0" * 33)
    return s


def intake_routes() -> Script:
    s = Script()
    s.comment("Several quests: a duplicate merged, an ignored fingerprint, a conflict child.")
    s.add("login-npe", "signal_sensed", signal=signal("sig-20", "fp-npe-login"))
    s.add("login-npe", "triage_decided", route="human", risk="high")
    s.add("login-npe", "signal_merged", signal=signal("sig-21", "fp-npe-login", "fatal"))
    s.add("login-npe", "research_started", actor="ann", route="research_only")
    s.add("debug-noise", "signal_sensed", signal=signal("sig-30", "fp-debug", "info"))
    s.add("debug-noise", "triage_decided", route="ignore", risk="low")
    s.add("login-npe-2", "signal_sensed", signal=signal("sig-40", "fp-npe-sso"), parent="login-npe")
    s.add("login-npe", "child_attached", child="login-npe-2", signal=signal("sig-40", "fp-npe-sso"))
    s.add("login-npe", "hypothesis_written", summary="session.user is None after SSO timeout")
    s.add("login-npe", "checkpoint_decided", actor="ann", checkpoint="A", verdict="approve")
    return s


def invalid() -> Script:
    s = Script()
    q = "billing-rounding"
    s.comment("A decision for the wrong checkpoint: replay exits 1 and names the event.")
    s.add(q, "signal_sensed", signal=signal("sig-50", "fp-rounding"))
    s.add(q, "triage_decided", route="auto_fix", risk="low")
    s.add(q, "research_started")
    s.add(q, "hypothesis_written", summary="Decimal quantize uses ROUND_HALF_EVEN")
    s.add(q, "checkpoint_decided", actor="ann", checkpoint="C", verdict="approve")
    return s


EXAMPLES = {
    "main-line.jsonl": main_line,
    "claims-and-revisions.jsonl": claims_and_revisions,
    "intake-routes.jsonl": intake_routes,
    "invalid-transition.jsonl": invalid,
}


def main() -> None:
    for name, build in EXAMPLES.items():
        (HERE / name).write_text(build().text(), encoding="utf-8")


if __name__ == "__main__":
    main()
