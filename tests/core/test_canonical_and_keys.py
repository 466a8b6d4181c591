import hashlib
import json
import shutil
import subprocess

import pytest

from ephyra.core.canonical import canonical_digest, canonical_json
from ephyra.core.effects import EffectType, parse_effect_key
from ephyra.core.proof import CheckResult, ProofBundle


def test_canonical_json_sorts_keys_drops_whitespace_and_keeps_utf8():
    assert canonical_json({"b": 1, "a": ["é", {"d": None, "c": True}]}) == (
        '{"a":["é",{"c":true,"d":null}],"b":1}'.encode()
    )


def test_the_digest_is_sha256_of_the_canonical_bytes():
    value = {"z": "ünïcode", "a": [3, 2, 1]}
    expected = hashlib.sha256(
        json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    assert canonical_digest(value) == f"sha256:{expected}"


def test_floats_are_refused_because_their_text_differs_between_languages():
    with pytest.raises(ValueError, match=r"refuses floats \(at checks\[0\].ratio\)"):
        canonical_json({"checks": [{"ratio": 0.5}]})


def test_a_bundle_digest_changes_with_any_field():
    bundle = ProofBundle(
        quest="q1",
        revision=1,
        risk="low",
        base="a" * 40,
        head="b" * 40,
        checks=(CheckResult(name="tests", passed=True),),
    )
    assert bundle.digest() != bundle.model_copy(update={"revision": 2}).digest()
    assert bundle.digest() == ProofBundle.model_validate(bundle.model_dump()).digest()


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_anyone_can_recompute_a_bundle_digest_with_jq(tmp_path):
    bundle = ProofBundle(
        quest="q1",
        revision=3,
        risk="high",
        base="a" * 40,
        head="b" * 40,
        checks=(CheckResult(name="tests", command="pytest -q", passed=True, duration_ms=12),),
    )
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle.model_dump(mode="json"), indent=4))
    compact = subprocess.run(
        ["jq", "-cS", ".", str(path)], capture_output=True, check=True
    ).stdout.rstrip(b"\n")
    assert "sha256:" + hashlib.sha256(compact).hexdigest() == bundle.digest()


def test_an_effect_key_splits_back_into_its_five_parts():
    key = parse_effect_key("checkout-500:2:run_proof:e017:1")
    assert key == ("checkout-500", 2, EffectType.RUN_PROOF, "e017", 1)
    assert str(key) == "checkout-500:2:run_proof:e017:1"


@pytest.mark.parametrize(
    "bad", ["q1:1:run_proof:e1", "q1:x:run_proof:e1:0", "q1:1:dance:e1:0", "a:b:c:d:e:f"]
)
def test_a_malformed_effect_key_is_refused(bad):
    with pytest.raises(ValueError):
        parse_effect_key(bad)
