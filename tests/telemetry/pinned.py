"""A fixed sample of OTLP records and texts whose candidates and redactions are pinned.

The sample (``fixtures/pinned_input.json``) holds real-shaped error records in four languages
(from the benchmark's generator, its Python tracebacks frozen as text), every redaction rule's
examples in every text field, lines mixing many secrets, non-ASCII text, lines too long for the
line cache, message-only errors, and redaction texts made by mixing the rules' examples. The
outputs (``fixtures/pinned_output.json``) were written by the code before any speed work:
``test_pinned.py`` fails when a byte of any fingerprint, redacted text or frame changes.

Regenerate only for a deliberate change of behaviour (and a new ``FINGERPRINT_VERSION`` when
fingerprints move): ``.venv/bin/python -m tests.telemetry.pinned inputs`` rewrites the sample,
``.venv/bin/python -m tests.telemetry.pinned outputs`` the expected results.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import sys
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ephyra.redaction.rules import RULES
from ephyra.telemetry import IngestOptions, SignalCandidate

FIXTURES = Path(__file__).parent / "fixtures"
INPUT = FIXTURES / "pinned_input.json"
OUTPUT = FIXTURES / "pinned_output.json"
OPTIONS = {
    "default": IngestOptions(),
    "workspace": IngestOptions(
        path_roots=("/srv/app", "/app/shop"),
        in_app_include=("django/core",),
        in_app_exclude=("com.acme.shop.checkout.CheckoutController", "cart/"),
    ),
}
_ID_FIELDS = {"traceId", "spanId", "parentSpanId"}


# -- from the sample to request bodies ------------------------------------------------------


def _base64_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode() if k in _ID_FIELDS else _base64_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_base64_ids(v) for v in value]
    return value


def bodies(request: dict[str, Any], signal: str) -> dict[str, bytes]:
    """The request as OTLP JSON and as binary protobuf (ids hex in one, bytes in the other)."""
    message = ExportLogsServiceRequest() if signal == "logs" else ExportTraceServiceRequest()
    json_format.ParseDict(_base64_ids(request), message)
    return {"json": json.dumps(request).encode(), "protobuf": message.SerializeToString()}


def plain(candidate: SignalCandidate, options_only: bool = False) -> dict[str, Any]:
    """Every field of the candidate; with ``options_only`` just what the workspace options
    change (the rest is pinned once, with the default options)."""
    if options_only:
        return {
            "fingerprint": candidate.fingerprint,
            "culprit": candidate.culprit,
            "paths": list(candidate.paths),
            "in_app": [f.in_app for f in candidate.frames],
        }
    out = candidate._asdict()
    out["frames"] = [dataclasses.asdict(frame) for frame in candidate.frames]
    out["severity"] = str(candidate.severity)
    out["attributes"] = dict(candidate.attributes)
    out["resource"] = dict(candidate.resource)
    return out


# -- the sample -----------------------------------------------------------------------------


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, bytes):
        return {"bytesValue": base64.b64encode(v).decode()}
    if isinstance(v, list):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": _kvs(v)}}
    return {"stringValue": v}


def _kvs(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in attributes.items()]


def _record(rng: random.Random, attributes: dict[str, Any], **fields: Any) -> dict[str, Any]:
    record = {
        "timeUnixNano": str(1_767_600_000_000_000_000 + rng.randrange(10**12)),
        "severityNumber": 17,
        "traceId": f"{rng.getrandbits(128):032x}",
        "spanId": f"{rng.getrandbits(64):016x}",
        "attributes": _kvs(attributes),
    }
    record.update(fields)
    return {k: v for k, v in record.items() if v is not None}


def _resource_logs(resource: dict[str, Any], scope: str, records: list[Any]) -> dict[str, Any]:
    return {
        "resource": {"attributes": _kvs(resource)},
        "scopeLogs": [{"scope": {"name": scope}, "logRecords": records}],
    }


def _positives() -> list[str]:
    return [text for rule in RULES for text, _ in rule.positives]


def _negatives() -> list[str]:
    return [text for rule in RULES for text in rule.negatives]


def _mixed_texts(rng: random.Random, count: int) -> list[str]:
    """Texts made of rule examples, separators and odd characters, as the fuzz test mixes them."""
    pieces = [*_positives(), *_negatives()]
    glue = [" ", "\n", "=", ":", "@", "\t", ", ", '"', "'", "password=", "Bearer ", "://", "-"]
    odd = ["İ", "ß", "Ω", "é", "日本", "\u200b", "😀", "K", "\u017f", "0x1f", "12:34", "10.0.0.1"]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randrange(1, 7)):
            roll = rng.random()
            if roll < 0.5:
                parts.append(rng.choice(pieces))
            elif roll < 0.8:
                parts.append(rng.choice(glue))
            else:
                parts.append(rng.choice(odd))
        out.append("".join(parts))
    return out


def _fixture_traces() -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted(FIXTURES.glob("*.txt"))}


def build_input() -> dict[str, Any]:
    from benchmarks import ingest as bench  # the benchmark's realistic records

    rng = random.Random(20261203)
    positives, negatives = _positives(), _negatives()
    everything = " | ".join(positives)
    languages = {"python": "python", "java": "java", "javascript": "nodejs", "go": "go"}
    resource_logs = []

    # Real-shaped errors in four languages, one resource per language.
    by_language: dict[str, list[Any]] = {}
    for r in bench.build_records(60, seed=11):
        by_language.setdefault(r.language, []).append(
            _record(
                rng,
                r.attributes,
                severityText="ERROR",
                body={"stringValue": "unhandled error"},
            )
        )
    for language, records in by_language.items():
        resource = {
            "service.name": f"shop-{language}",
            "service.version": "2026.1.5",
            "deployment.environment.name": "production",
            "telemetry.sdk.language": languages[language],
        }
        resource_logs.append(_resource_logs(resource, f"{language}.errors", records))

    # The stack fixtures: with the hint, without it, as the body only, with secrets inside.
    traces = _fixture_traces()
    records = []
    for trace in traces.values():
        records.append(_record(rng, {"exception.stacktrace": trace}))
        records.append(_record(rng, {}, body={"stringValue": trace}))
        seeded = trace.replace("\n", f" token={rng.getrandbits(64):x}\n", 2)
        records.append(
            _record(rng, {"exception.stacktrace": seeded, "exception.message": everything})
        )
        records.append(
            _record(
                rng,
                {"exception.type": "Boom", "exception.stacktrace": trace + everything},
                severityText="CRITICAL",
                severityNumber=None,
            )
        )
    resource_logs.append(_resource_logs({"service.name": "fixtures"}, "fixtures", records))

    # Every rule's examples, in every field a candidate redacts.
    records = []
    for text in [*positives, *negatives, everything, "\n".join(positives)]:
        records.append(
            _record(
                rng,
                {
                    "exception.type": "ValueError",
                    "exception.message": text,
                    "nested": {"inner": text, "password": text, "list": [text, 7, True]},
                    f"key {text[:40]}": "value",
                    "db.password": text,
                    "count": 3,
                    "ratio": 0.5,
                    "raw": text.encode()[:32],
                },
                body={"stringValue": text},
            )
        )
    resource = {"service.name": everything[:300], "host.name": "db-1.internal 10.1.2.3"}
    resource_logs.append(_resource_logs(resource, everything[:200], records))

    # Message-only errors: parameterised into the fingerprint.
    records = []
    for n in range(20):
        message = (
            f"timeout after {rng.randrange(1000)}ms at 2026-01-{n + 1:02d}T10:{n:02d}:00Z for "
            f"{rng.getrandbits(128):032x} req 6f1c1f4e-8b8a-4b0e-9a52-0c6d7e2f6a{n:02d} from "
            f"10.0.{n}.7 user{n}@example.com 0x{rng.getrandbits(32):x} İstanbul ß {'x' * (n * 40)}"
        )
        records.append(_record(rng, {"exception.message": message}))
        records.append(_record(rng, {}, body={"stringValue": message}))
    long_line = " ".join([*positives, *negatives] * 3)  # past the line cache's longest line
    records.append(_record(rng, {"exception.message": long_line, "exception.type": "Long"}))
    records.append(_record(rng, {}, severityNumber=9, body={"stringValue": "info, dropped"}))
    records.append(_record(rng, {"exception.message": "bad id"}, traceId="abcd"))
    records.append(_record(rng, {}, body=None))
    resource_logs.append(_resource_logs({"service.name": "messages"}, "messages", records))

    spans = []
    for name, trace in traces.items():
        events = [
            {
                "name": "exception",
                "timeUnixNano": str(1_767_600_000_000_000_000 + i),
                "attributes": _kvs(
                    {
                        "exception.type": f"{name}Error",
                        "exception.message": f"{positives[i]} in {name}",
                        "exception.stacktrace": trace,
                    }
                ),
            }
            for i in range(2)
        ]
        spans.append(
            {
                "traceId": f"{rng.getrandbits(128):032x}",
                "spanId": f"{rng.getrandbits(64):016x}",
                "name": f"GET /{name}",
                "endTimeUnixNano": "1767600000000000999",
                "attributes": _kvs({"http.url": f"https://u:p4ss@{name}.example.com/?token=x"}),
                "events": [*events, {"name": "log", "attributes": []}],
            }
        )
    traces_request = {
        "resourceSpans": [
            {
                "resource": {"attributes": _kvs({"service.name": "spans"})},
                "scopeSpans": [{"scope": {"name": "web"}, "spans": spans}],
            }
        ]
    }
    return {
        "logs": {"resourceLogs": resource_logs},
        "traces": traces_request,
        "texts": [*_mixed_texts(rng, 400), *positives, *negatives, everything],
    }


def load_input() -> dict[str, Any]:
    return json.loads(INPUT.read_text())


def compute_output(sample: dict[str, Any]) -> dict[str, Any]:
    """What the ingest package makes of the sample, with each set of options: the protobuf
    body's candidates, and whether the JSON body gave the same."""
    from ephyra.redaction.redact import redact
    from ephyra.telemetry import parse_logs, parse_traces

    out: dict[str, Any] = {"redact": [redact(t) for t in sample["texts"]]}
    for name, options in OPTIONS.items():
        for signal, parse in (("logs", parse_logs), ("traces", parse_traces)):
            wire = bodies(sample[signal], signal)
            result = parse(wire["protobuf"], "application/x-protobuf", options=options)
            from_json = parse(wire["json"], "application/json", options=options)
            out[f"{signal}/{name}"] = {
                "records": result.records,
                "dropped": result.dropped,
                "rejected": result.rejected,
                "rejection": result.rejection,
                "json_rejection": from_json.rejection,
                "json_same_candidates": from_json.candidates == result.candidates,
                "candidates": [plain(c, name == "workspace") for c in result.candidates],
            }
    return json.loads(json.dumps(out))  # tuples as lists, as the pinned file has them


def main(argv: list[str]) -> int:
    if argv == ["inputs"]:
        INPUT.write_text(json.dumps(build_input(), indent=0, ensure_ascii=False) + "\n")
    elif argv == ["outputs"]:
        output = compute_output(load_input())
        OUTPUT.write_text(json.dumps(output, indent=0, ensure_ascii=False) + "\n")
    else:
        print("usage: python -m tests.telemetry.pinned inputs|outputs", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
