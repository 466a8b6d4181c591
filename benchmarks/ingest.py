"""Benchmark: OTLP logs → signal candidates, against decoding alone with the usual libraries.

``.venv/bin/python benchmarks/ingest.py [--records N] [--batch B] [--repeat K]``. Builds N
error log records (default 100,000) in requests of B records (default 512, the SDK's batch
size): real Python tracebacks (code compiled under application and site-packages paths, raised
and formatted by ``traceback``), and Java, Node and Go traces with varying ids, line numbers,
users, hosts and, in one record of ten, a secret. Every message, request id and URL differs;
frame lines repeat, as they do in production (redaction remembers lines it has seen; each run
starts with that memory empty, and the "line cache off" row shows the cost when nothing
repeats). Each request is encoded once as protobuf and once as OTLP JSON (untimed).

Timed in CPU seconds of this one process and thread (``time.process_time``: the rates are per
core, and other work on the machine does not count against them), best of K runs:

- **ephyra parse_logs**: decode + pick errors + redact every field + parse the stack +
  fingerprint, for each format; and once more for protobuf with redaction's line cache off
  (every line redacted from scratch, as if no frame line ever repeated);
- **protobuf FromString**: the generated ``ExportLogsServiceRequest`` parser (upb) alone;
- **json_format.Parse**: protobuf's JSON mapping into the same message, alone (it would read
  the hex ids as base64 — the usual mistake — but its time is what a user would otherwise pay);
- **json.loads**: the standard library's parser alone, the floor for any JSON reader.

Before timing, both formats must give the same candidates (fingerprints, titles, redacted
texts); otherwise the first difference is printed and the exit status is 1.
"""

from __future__ import annotations

import argparse
import gc
import json
import linecache
import platform
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: put the project root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

from ephyra.redaction import redact as redaction
from ephyra.telemetry import JSON, PROTOBUF, parse_logs

TARGET = 20_000  # records per second per core, each format
SERVICES = ("checkout", "payments", "catalog", "accounts")
COLD = "ephyra parse_logs, line cache off"
OURS, PB_BASE, JF_BASE, JSON_BASE = (
    "ephyra parse_logs",
    "protobuf FromString",
    "json_format.Parse",
    "json.loads",
)

# -- Python: real exceptions raised through code that lives at realistic paths ---------------

_PY_SOURCES = {
    "/usr/local/lib/python3.12/site-packages/django/core/handlers/base.py": (
        "def get_response(view, request):\n    response = view(request)\n    return response\n"
    ),
    "/app/shop/checkout/views.py": (
        "def checkout(request):\n"
        "    total = compute_total(request)\n"
        "    return total\n"
        "def compute_total(request):\n"
        "    items = request['items']\n"
        "    return sum(items) / len(items)\n"
    ),
    "/app/shop/payments/gateway.py": (
        "def charge(request):\n"
        "    card = request['card']\n"
        "    return authorise(card, request)\n"
        "def authorise(card, request):\n"
        "    raise PermissionError(f\"card declined for {request['user']} from {request['ip']}\")\n"
    ),
    "/app/shop/catalog/search.py": (
        "def search(request):\n"
        "    return lookup(request)[request['sku']]\n"
        "def lookup(request):\n"
        "    return {}\n"
    ),
}


def _python_code() -> dict[str, dict[str, Any]]:
    spaces: dict[str, dict[str, Any]] = {}
    for path, source in _PY_SOURCES.items():
        linecache.cache[path] = (len(source), None, source.splitlines(True), path)
        space: dict[str, Any] = {}
        exec(compile(source, path, "exec"), space)
        spaces[path] = space
    return spaces


def _python_trace(
    spaces: dict[str, dict[str, Any]], rng: random.Random, n: int
) -> tuple[str, str, str]:
    views = spaces["/app/shop/checkout/views.py"]
    pay = spaces["/app/shop/payments/gateway.py"]
    search = spaces["/app/shop/catalog/search.py"]
    get_response = spaces["/usr/local/lib/python3.12/site-packages/django/core/handlers/base.py"][
        "get_response"
    ]
    request = {
        "items": [],
        "card": "4111",
        "user": f"user{n}@example.com",
        "ip": f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
        "sku": f"SKU-{n:07d}",
    }
    view = rng.choice((views["checkout"], pay["charge"], search["search"]))
    try:
        get_response(view, request)
    except Exception as error:  # the point is a real traceback of whatever was raised
        return type(error).__name__, str(error), traceback.format_exc()
    raise AssertionError("the view did not raise")


# -- Java, Node, Go: literal traces with the parts that vary between occurrences -------------

_JAVA = """java.lang.IllegalStateException: order {order} has no lines (user {user})
\tat com.acme.shop.checkout.CheckoutService.total(CheckoutService.java:{l1})
\tat com.acme.shop.checkout.CheckoutController.checkout(CheckoutController.java:{l2})
\tat java.base/jdk.internal.reflect.DirectMethodHandleAccessor.invoke(Unknown Source)
\tat java.base/java.lang.reflect.Method.invoke(Method.java:580)
\tat org.springframework.web.method.support.InvocableHandlerMethod.doInvoke(Invocable.java:255)
\tat org.springframework.web.servlet.DispatcherServlet.doDispatch(DispatcherServlet.java:1089)
\tat org.springframework.web.servlet.FrameworkServlet.processRequest(FrameworkServlet.java:1014)
\tat jakarta.servlet.http.HttpServlet.service(HttpServlet.java:658)
\tat org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:166)
\tat org.apache.tomcat.util.threads.ThreadPoolExecutor$Worker.run(ThreadPoolExecutor.java:659)
\tat java.base/java.lang.Thread.run(Thread.java:1583)
Caused by: java.sql.SQLException: connection to {ip}:5432 refused
\tat org.postgresql.core.v3.ConnectionFactoryImpl.openConnectionImpl(ConnectionFactoryImpl.java:342)
\t... 11 more
"""
_NODE = """TypeError: Cannot read properties of undefined (reading 'price') for cart {order}
    at lineTotal (/srv/app/src/cart/total.js:{l1}:23)
    at Array.map (<anonymous>)
    at cartTotal (/srv/app/src/cart/total.js:{l2}:18)
    at /srv/app/src/routes/checkout.js:31:20
    at Layer.handle [as handle_request] (/srv/app/node_modules/express/lib/router/layer.js:95:5)
    at next (/srv/app/node_modules/express/lib/router/route.js:149:13)
    at Route.dispatch (/srv/app/node_modules/express/lib/router/route.js:119:3)
    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)
"""
_GO = """panic: runtime error: index out of range [{idx}] with length {length}

goroutine {gid} [running]:
github.com/acme/shop/internal/cart.(*Cart).Line(0xc000{addr}, 0x{idx:x})
\t/build/internal/cart/cart.go:{l1} +0x1d4
github.com/acme/shop/internal/api.(*Server).checkout(0xc0001a2000, {{0x9a7c40, 0xc0}}, 0xc000{addr})
\t/build/internal/api/checkout.go:{l2} +0x2b1
net/http.HandlerFunc.ServeHTTP(0xc000112340, {{0x9a7c40, 0xc0002b4000}}, 0xc000{addr})
\t/usr/local/go/src/net/http/server.go:2220 +0x29
net/http.(*ServeMux).ServeHTTP(0xc000110000, {{0x9a7c40, 0xc0002b4000}}, 0xc000{addr})
\t/usr/local/go/src/net/http/server.go:2747 +0x1cb
net/http.(*conn).serve(0xc0001f8000, {{0x9a8270, 0xc000118000}})
\t/usr/local/go/src/net/http/server.go:2009 +0x5f4
created by net/http.(*Server).Serve in goroutine 1
\t/usr/local/go/src/net/http/server.go:3360 +0x485
"""
_SECRETS = (
    "retrying with password={pw}",
    "Authorization: Bearer {tok}",
    "db url postgres://shop:{pw}@db-{n}.internal:5432/shop",
    "token ghp_{tok36}",
    "aws key AKIA{ak16}",
    "card 4111 1111 1111 1111 declined",
)


@dataclass(frozen=True, slots=True)
class Record:
    language: str
    exc_type: str
    message: str
    stacktrace: str
    attributes: dict[str, str]
    time: int
    trace_id: bytes
    span_id: bytes


def _alnum(rng: random.Random, n: int) -> str:
    return "".join(
        rng.choices("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", k=n)
    )


def build_records(count: int, seed: int = 7) -> list[Record]:
    rng = random.Random(seed)
    spaces = _python_code()
    out = []
    for n in range(count):
        kind = ("python", "python", "java", "javascript", "go")[n % 5]
        fields = {
            "order": f"ord_{rng.randrange(10**9):09d}",
            "user": f"user{rng.randrange(10**6)}@example.com",
            "ip": f"192.168.{rng.randrange(256)}.{rng.randrange(1, 255)}",
            "l1": rng.randrange(10, 400),
            "l2": rng.randrange(10, 400),
            "idx": rng.randrange(3, 40),
            "length": rng.randrange(0, 3),
            "gid": rng.randrange(1, 5000),
            "addr": f"{rng.randrange(16**6):06x}",
        }
        if kind == "python":
            exc_type, message, stack = _python_trace(spaces, rng, n)
        elif kind == "java":
            stack = _JAVA.format(**fields)
            exc_type, message = (
                "java.lang.IllegalStateException",
                stack.split(": ", 1)[1].split("\n")[0],
            )
        elif kind == "javascript":
            stack = _NODE.format(**fields)
            exc_type, message = "TypeError", stack.split(": ", 1)[1].split("\n")[0]
        else:
            stack = _GO.format(**fields)
            exc_type, message = "panic", stack.split(": ", 1)[1].split("\n")[0]
        if n % 10 == 3:
            secret = rng.choice(_SECRETS).format(
                pw=_alnum(rng, 14),
                tok=_alnum(rng, 32),
                tok36=_alnum(rng, 36),
                ak16=_alnum(rng, 16).upper(),
                n=n,
            )
            message = f"{message}; {secret}"
        attributes = {
            "exception.type": exc_type,
            "exception.message": message,
            "exception.stacktrace": stack,
            "http.route": "/api/checkout",
            "http.request.method": "POST",
            "enduser.id": f"u-{rng.randrange(10**6)}",
            "request.id": f"{rng.getrandbits(128):032x}",
            "url.full": f"https://shop.example.com/api/checkout?cart={n}&token={_alnum(rng, 20)}",
        }
        out.append(
            Record(
                kind,
                exc_type,
                message,
                stack,
                attributes,
                1_767_600_000_000_000_000 + n * 1_000_000,
                rng.getrandbits(128).to_bytes(16, "big"),
                rng.getrandbits(64).to_bytes(8, "big"),
            )
        )
    return out


_LANGUAGE = {"python": "python", "java": "java", "javascript": "nodejs", "go": "go"}


def _resource(service: str, language: str) -> list[KeyValue]:
    attrs = {
        "service.name": service,
        "service.version": "2026.1.5",
        "deployment.environment.name": "production",
        "host.name": f"{service}-7d9f8b6c4d-x2x9k",
        "telemetry.sdk.language": language,
    }
    return [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attrs.items()]


def encode_protobuf(records: list[Record]) -> bytes:
    """One request: a resource per (service, language), records in their scope."""
    groups: dict[tuple[str, str], list[Record]] = {}
    for i, r in enumerate(records):
        groups.setdefault((SERVICES[i % len(SERVICES)], r.language), []).append(r)
    request = ExportLogsServiceRequest()
    for (service, language), group in groups.items():
        resource_logs = ResourceLogs()
        resource_logs.resource.attributes.extend(_resource(service, _LANGUAGE[language]))
        scope = ScopeLogs()
        scope.scope.name = f"{service}.errors"
        for r in group:
            record = LogRecord(
                time_unix_nano=r.time,
                observed_time_unix_nano=r.time + 1000,
                severity_number=17,
                severity_text="ERROR",
                trace_id=r.trace_id,
                span_id=r.span_id,
                body=AnyValue(string_value=f"unhandled error in {service}"),
            )
            record.attributes.extend(
                KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in r.attributes.items()
            )
            scope.log_records.append(record)
        resource_logs.scope_logs.append(scope)
        request.resource_logs.append(resource_logs)
    return request.SerializeToString()


def _json_value(value: Any) -> dict[str, Any]:
    return {"stringValue": value}


def encode_json(records: list[Record]) -> bytes:
    """The same request as ``encode_protobuf``, in OTLP JSON (hex ids, integer enums, 64-bit
    integers as strings, as the OpenTelemetry collector writes it)."""
    groups: dict[tuple[str, str], list[Record]] = {}
    for i, r in enumerate(records):
        groups.setdefault((SERVICES[i % len(SERVICES)], r.language), []).append(r)
    resource_logs = []
    for (service, language), group in groups.items():
        resource = [
            {"key": kv.key, "value": _json_value(kv.value.string_value)}
            for kv in _resource(service, _LANGUAGE[language])
        ]
        log_records = [
            {
                "timeUnixNano": str(r.time),
                "observedTimeUnixNano": str(r.time + 1000),
                "severityNumber": 17,
                "severityText": "ERROR",
                "traceId": r.trace_id.hex(),
                "spanId": r.span_id.hex(),
                "body": {"stringValue": f"unhandled error in {service}"},
                "attributes": [
                    {"key": k, "value": _json_value(v)} for k, v in r.attributes.items()
                ],
            }
            for r in group
        ]
        resource_logs.append(
            {
                "resource": {"attributes": resource},
                "scopeLogs": [{"scope": {"name": f"{service}.errors"}, "logRecords": log_records}],
            }
        )
    return json.dumps({"resourceLogs": resource_logs}).encode()


# -- timing ---------------------------------------------------------------------------------


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        # Forget the lines redacted by the run before: a server has seen the frame lines of its
        # errors before, never the messages and ids of the request it is reading.
        redaction.set_line_cache_size(redaction.set_line_cache_size(0))
        gc.collect()
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def _first_difference(pb: list[bytes], js: list[bytes]) -> str | None:
    for i, (a, b) in enumerate(zip(pb, js, strict=True)):
        ca, cb = parse_logs(a, PROTOBUF).candidates, parse_logs(b, JSON).candidates
        if len(ca) != len(cb):
            return f"batch {i}: {len(ca)} candidates from protobuf, {len(cb)} from JSON"
        for j, (x, y) in enumerate(zip(ca, cb, strict=True)):
            if x != y:
                return f"batch {i} candidate {j}: protobuf {x.title!r} != JSON {y.title!r}"
    return None


def _cold(body: bytes) -> object:
    saved = redaction.set_line_cache_size(0)
    try:
        return parse_logs(body, PROTOBUF)
    finally:
        redaction.set_line_cache_size(saved)


@dataclass
class Report:
    rows: list[tuple[str, str, float]]  # format, implementation, seconds for all records
    records: int
    mismatch: str | None
    text: str


def run(records: int = 100_000, batch: int = 512, repeat: int = 3, echo: bool = True) -> Report:
    data = build_records(records)
    chunks = [data[i : i + batch] for i in range(0, len(data), batch)]
    pb = [encode_protobuf(c) for c in chunks]
    js = [encode_json(c) for c in chunks]
    mismatch = _first_difference(pb, js)
    if mismatch:
        text = f"formats disagree: {mismatch}"
        if echo:
            print(text)
        return Report([], records, mismatch, text)
    found = sum(len(parse_logs(b, PROTOBUF).candidates) for b in pb)
    assert found == records, (found, records)
    # The workload is the benchmark's, not the request's: keep only the bodies, and take them
    # out of the collector's sight, so no implementation pays for scanning the fixtures.
    del data, chunks
    gc.collect()
    gc.freeze()

    def each(bodies: list[bytes], fn: Callable[[bytes], object]) -> Callable[[], None]:
        def loop() -> None:
            for body in bodies:  # one request at a time, its result dropped, as a server does
                fn(body)

        return loop

    rows = [
        ("protobuf", OURS, _best(each(pb, lambda b: parse_logs(b, PROTOBUF)), repeat)),
        ("protobuf", COLD, _best(each(pb, _cold), 1)),
        ("protobuf", PB_BASE, _best(each(pb, ExportLogsServiceRequest.FromString), repeat)),
        ("json", OURS, _best(each(js, lambda b: parse_logs(b, JSON)), repeat)),
        (
            "json",
            JF_BASE,
            _best(
                each(
                    js,
                    lambda b: json_format.Parse(
                        b, ExportLogsServiceRequest(), ignore_unknown_fields=True
                    ),
                ),
                repeat,
            ),
        ),
        ("json", JSON_BASE, _best(each(js, json.loads), repeat)),
    ]
    gc.unfreeze()
    text = _table(rows, records, batch, sum(map(len, pb)), sum(map(len, js)))
    if echo:
        print(text)
    return Report(rows, records, None, text)


def _table(rows: list[tuple[str, str, float]], records: int, batch: int, pb: int, js: int) -> str:
    lines = [
        f"# ingest benchmark: {records} error log records in requests of {batch}, "
        f"protobuf {pb / 1e6:.1f} MB, JSON {js / 1e6:.1f} MB",
        f"# Python {platform.python_version()} on {platform.machine()}, one thread (per core)",
        "",
        "| format | implementation | records/s per core | µs/record | ours ÷ this |",
        "|---|---|---:|---:|---:|",
    ]
    ours = {fmt: secs for fmt, name, secs in rows if name == OURS}  # COLD is compared to ours too
    for fmt, name, secs in rows:
        ratio = "1.00x" if name == OURS else f"{secs / ours[fmt]:.2f}x"
        lines.append(
            f"| {fmt} | {name} | {records / secs:,.0f} | {secs / records * 1e6:.1f} | {ratio} |"
        )
    lines.append("")
    lines.append(
        "ratio: our records/s divided by theirs (above 1 means we are faster than decoding alone)"
    )
    for fmt, secs in ours.items():
        rate = records / secs
        verdict = "met" if rate >= TARGET else "NOT met"
        lines.append(f"target: {fmt} >= {TARGET:,} records/s per core — {verdict} ({rate:,.0f})")
    lines.append("- both formats gave identical candidates (checked before timing).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    report = run(args.records, args.batch, args.repeat)
    return 1 if report.mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
