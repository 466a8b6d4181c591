"""OTLP JSON ("JSON Protobuf Encoding" in the OTLP specification), read straight into values.

The proto3 JSON mapping with OTLP's deviations: ``traceId``/``spanId`` are hex, not base64;
enums are integers only (a name such as ``"SEVERITY_NUMBER_ERROR"`` is refused); keys are
lowerCamelCase and anything else (``time_unix_nano`` included) is an unknown field, ignored;
64-bit integers may be numbers or decimal strings; ``null`` is the field's default.

Walking the dictionaries directly, rather than through ``google.protobuf.json_format``, is what
makes the JSON path about as fast as the binary one (``benchmarks/ingest.py``). Structure above
a record that is wrong (``resourceLogs`` not an array…) fails the request with
``OtlpDecodeError``; a record with a wrong field is rejected on its own.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Any

try:  # a declared dependency; without it the standard library reads every body
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None

from ephyra.core.states import Severity
from ephyra.telemetry.errors import OtlpDecodeError
from ephyra.telemetry.signals import (
    IngestOptions,
    Raw,
    Tally,
    Unusable,
    log_severity,
    resource_info,
)

MAX_DEPTH = 32
_DECIMAL = re.compile(r"-?\d{1,20}")
_HEX_DIGITS = "0123456789abcdefABCDEF"
_VALUE_KEYS = (
    "stringValue",
    "boolValue",
    "intValue",
    "doubleValue",
    "arrayValue",
    "kvlistValue",
    "bytesValue",
)
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# Digits as "0", what may stand right before a number (":", "[", ",", whitespace) as ":", "-"
# as it is, anything else as "x": an integer too wide for 64 bits is then a plain substring (a
# regular expression for it scans ~40x slower than translate and find together), and a digit
# run inside a string (a hex id with twenty digits in a row, in one request of four) is not
# taken for one. Long fractions and exponents need no check: orjson rounds them as ``json``.
_NUMBER_SHAPE = bytes(
    0x30 if 0x30 <= i <= 0x39 else 0x3A if i in b":[, \t\r\n" else 0x2D if i == 0x2D else 0x78
    for i in range(256)
)
_WIDE, _WIDE_NEGATIVE = b":" + b"0" * 20, b":-" + b"0" * 19


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def load(body: bytes) -> dict[str, Any]:
    """The request object, or ``OtlpDecodeError`` with the parser's own words."""
    data = _fast_load(body)
    if data is not None:
        return data
    try:
        data = json.loads(body)
    except UnicodeDecodeError as error:
        raise OtlpDecodeError(f"malformed JSON: not UTF-8 ({error.reason})") from None
    except ValueError as error:
        raise OtlpDecodeError(f"malformed JSON: {error}") from None
    except RecursionError:
        raise OtlpDecodeError("malformed JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise OtlpDecodeError(f"an OTLP JSON request must be an object, got {_kind(data)}")
    return data


def _fast_load(body: bytes) -> Any:
    """The request through orjson (about twice as fast) when it reads it exactly as the standard
    library would; None to let the standard library decide, with its own words for errors.

    orjson refuses what ``json`` reads leniently (NaN, a BOM, UTF-16, lone surrogates, 1e400,
    deep nesting): those fall through. It reads an integer past 64 bits as a float where
    ``json`` keeps it exact: a body with an integer part that long (20 digits, or 19 after a
    minus) is left to ``json``.
    Otherwise both give the same values (numbers fuzzed)."""
    if _orjson is None:
        return None
    shape = body.translate(_NUMBER_SHAPE)
    if _WIDE in shape or _WIDE_NEGATIVE in shape:
        return None
    try:
        data = _orjson.loads(body)
    except _orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


# -- structure (errors fail the request) ----------------------------------------------------


def _array(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise OtlpDecodeError(f"{where}.{key} must be an array, got {_kind(value)}")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OtlpDecodeError(f"{where} must be an object, got {_kind(value)}")
    return value


def _scope_name(scope_entry: dict[str, Any], where: str) -> str:
    name = _object(scope_entry.get("scope"), f"{where}.scope").get("name")
    if name is None:
        return ""
    if not isinstance(name, str):
        raise OtlpDecodeError(f"{where}.scope.name must be a string, got {_kind(name)}")
    return name


def _resource(entry: dict[str, Any], where: str) -> dict[str, Any]:
    resource = _object(entry.get("resource"), f"{where}.resource")
    try:
        return _attributes(resource.get("attributes"))
    except Unusable as error:
        raise OtlpDecodeError(f"{where}.resource: {error}") from None


# -- fields (errors reject the record) ------------------------------------------------------


def _uint64(value: Any, name: str) -> int:
    if value is None:
        return 0
    if type(value) is str and value.isascii() and value.isdigit() and len(value) <= 20:
        value = int(value)  # the usual form of a timestamp: a decimal string
    elif (isinstance(value, str) and _DECIMAL.fullmatch(value)) or (
        isinstance(value, float) and value.is_integer()
    ):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise Unusable(f"{name} must be an unsigned 64-bit integer, got {_kind(value)}")
    return value


def _int64(value: Any, name: str) -> int:
    if (isinstance(value, str) and _DECIMAL.fullmatch(value)) or (
        isinstance(value, float) and value.is_integer()
    ):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise Unusable(f"{name} must be a 64-bit integer, got {_kind(value)}")
    return value


def _string(value: Any, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Unusable(f"{name} must be a string, got {_kind(value)}")
    return value


def _hex_id(value: Any, size: int, name: str) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise Unusable(f"{name} must be a hex string, got {_kind(value)}")
    if len(value) != 2 * size or value.strip(_HEX_DIGITS):  # what is left is not hex
        raise Unusable(f"{name} must be {2 * size} hex digits, got {len(value)} characters")
    value = value.lower()
    return "" if value.count("0") == 2 * size else value


def _severity_number(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unusable(
            f"severityNumber must be an integer (OTLP JSON encodes enums as numbers), "
            f"got {_kind(value)}"
        )
    if not 0 <= value <= 24:
        raise Unusable(f"severityNumber {value} is outside 0-24")
    return value


def _double(value: Any) -> float:
    if isinstance(value, str):
        if value in _FLOAT_WORDS:
            return _FLOAT_WORDS[value]
        try:
            return float(value)
        except ValueError:
            pass
    elif isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise Unusable(f"doubleValue must be a number, got {_kind(value)}")


def _any_value(value: Any, depth: int = 0) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Unusable(f"an AnyValue must be an object, got {_kind(value)}")
    if len(value) == 1:  # the usual shape, {"stringValue": "…"}: no search for the field
        inner = value.get("stringValue")
        if isinstance(inner, str):
            return inner
    present = [k for k in _VALUE_KEYS if value.get(k) is not None]
    if not present:
        return None
    if len(present) > 1:
        raise Unusable(f"an AnyValue sets more than one of its fields: {', '.join(present)}")
    key = present[0]
    inner = value[key]
    if key == "stringValue":
        return _string(inner, key)
    if key == "boolValue":
        if not isinstance(inner, bool):
            raise Unusable(f"boolValue must be true or false, got {_kind(inner)}")
        return inner
    if key == "intValue":
        return _int64(inner, key)
    if key == "doubleValue":
        return _double(inner)
    if key == "bytesValue":
        return _bytes(inner)
    if depth >= MAX_DEPTH:
        return "…"
    if not isinstance(inner, dict):
        raise Unusable(f"{key} must be an object, got {_kind(inner)}")
    values = inner.get("values")
    if values is None:
        values = []
    if not isinstance(values, list):
        raise Unusable(f"{key}.values must be an array, got {_kind(values)}")
    if key == "arrayValue":
        return [_any_value(v, depth + 1) for v in values]
    return _attributes(values, depth + 1)


def _bytes(value: Any) -> bytes:
    if not isinstance(value, str):
        raise Unusable(f"bytesValue must be a base64 string, got {_kind(value)}")
    try:
        padded = value + "=" * (-len(value) % 4)
        if "-" in value or "_" in value:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        raise Unusable("bytesValue is not valid base64") from None


def _attributes(items: Any, depth: int = 0) -> dict[str, Any]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise Unusable(f"attributes must be an array of key/value objects, got {_kind(items)}")
    out: dict[str, Any] = {}
    for item in items:
        # The usual attribute, {"key": "k", "value": {"stringValue": "v"}}, read inline (by
        # subscripts: a try costs nothing until it catches, a .get is a call each); any other
        # shape goes the long way below.
        try:
            key, value = item["key"], item["value"]
            if type(key) is str and type(value) is dict and len(value) == 1:
                inner = value["stringValue"]
                if type(inner) is str:
                    out[key] = inner
                    continue
        except (KeyError, TypeError):  # a missing field, or not an object at all
            pass
        if not isinstance(item, dict):
            raise Unusable(f"an attribute must be an object with key and value, got {_kind(item)}")
        key = item.get("key")
        if not isinstance(key, str):
            key = _string(key, "an attribute key")
        out[key] = _any_value(item.get("value"), depth)
    return out


# -- walkers --------------------------------------------------------------------------------


def walk_logs(data: dict[str, Any], tally: Tally, options: IngestOptions) -> None:
    for r, entry in enumerate(_array(data, "resourceLogs", "request")):
        where = f"resourceLogs[{r}]"
        entry = _object(entry, where)
        raw_resource = _resource(entry, where)
        resource = None
        for s, scope_entry in enumerate(_array(entry, "scopeLogs", where)):
            scope_where = f"{where}.scopeLogs[{s}]"
            scope_entry = _object(scope_entry, scope_where)
            scope = _scope_name(scope_entry, scope_where)
            prefix = f"{scope_where}.logRecords"
            for i, record in enumerate(_array(scope_entry, "logRecords", scope_where)):
                tally.records += 1
                try:
                    if not isinstance(record, dict):
                        raise Unusable(f"a log record must be an object, got {_kind(record)}")
                    # The usual values checked inline; anything else (absent, wrong) by the
                    # functions, which say what is wrong.
                    number = record.get("severityNumber")
                    if type(number) is not int or not 0 <= number <= 24:
                        number = _severity_number(number)
                    text = record.get("severityText")
                    if type(text) is not str:
                        text = _string(text, "severityText")
                    trace_id = _hex_id(record.get("traceId"), 16, "traceId")
                    span_id = _hex_id(record.get("spanId"), 8, "spanId")
                    severity = log_severity(number, text)
                    if severity is None:
                        tally.dropped += 1
                        continue
                    if resource is None:
                        resource = resource_info(raw_resource)
                    time = _uint64(record.get("timeUnixNano"), "timeUnixNano") or _uint64(
                        record.get("observedTimeUnixNano"), "observedTimeUnixNano"
                    )
                    attributes = _attributes(record.get("attributes"))
                    body = _any_value(record.get("body"))
                    tally.add(
                        prefix,
                        i,
                        [Raw("log", severity, attributes, resource, scope, trace_id, span_id,
                             time, body)],
                    )  # fmt: skip
                except Unusable as error:
                    tally.reject(prefix, i, str(error))


def _exception_events(span: dict[str, Any]) -> list[dict[str, Any]]:
    events = span.get("events")
    if events is None:
        return []
    if not isinstance(events, list):
        raise Unusable(f"events must be an array, got {_kind(events)}")
    out = []
    for event in events:
        if not isinstance(event, dict):
            raise Unusable(f"an event must be an object, got {_kind(event)}")
        if _string(event.get("name"), "an event name") == "exception":
            out.append(event)
    return out


def walk_traces(data: dict[str, Any], tally: Tally, options: IngestOptions) -> None:
    for r, entry in enumerate(_array(data, "resourceSpans", "request")):
        where = f"resourceSpans[{r}]"
        entry = _object(entry, where)
        raw_resource = _resource(entry, where)
        resource = None
        for s, scope_entry in enumerate(_array(entry, "scopeSpans", where)):
            scope_where = f"{where}.scopeSpans[{s}]"
            scope_entry = _object(scope_entry, scope_where)
            scope = _scope_name(scope_entry, scope_where)
            prefix = f"{scope_where}.spans"
            for i, span in enumerate(_array(scope_entry, "spans", scope_where)):
                tally.records += 1
                try:
                    if not isinstance(span, dict):
                        raise Unusable(f"a span must be an object, got {_kind(span)}")
                    trace_id = _hex_id(span.get("traceId"), 16, "traceId")
                    span_id = _hex_id(span.get("spanId"), 8, "spanId")
                    if not trace_id or not span_id:
                        raise Unusable("a span needs a non-zero traceId and spanId")
                    events = _exception_events(span)
                    if not events:
                        tally.dropped += 1
                        continue
                    if resource is None:
                        resource = resource_info(raw_resource)
                    extra = _attributes(span.get("attributes"))
                    end = _uint64(span.get("endTimeUnixNano"), "endTimeUnixNano")
                    raws: list[Raw] = []
                    try:
                        for event in events:
                            attributes = _attributes(event.get("attributes"))
                            at = _uint64(event.get("timeUnixNano"), "timeUnixNano") or end
                            raws.append(
                                Raw("span_event", Severity.ERROR, attributes, resource, scope,
                                    trace_id, span_id, at, extra=extra)
                            )  # fmt: skip
                    except Unusable as error:  # an event before it that is unusable wins
                        tally.add(prefix, i, raws, str(error))
                        continue
                    tally.add(prefix, i, raws)
                except Unusable as error:
                    tally.reject(prefix, i, str(error))
