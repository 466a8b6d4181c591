"""From decoded OTLP records to signal candidates: what counts, what is read, in what order.

Both wire formats (protobuf and JSON) hand this module plain Python values; everything after
decoding is shared, so the two formats cannot drift apart. Order per candidate: clean the text
(no NUL, no lone surrogate), redact every field, parse the stack from the redacted trace,
fingerprint, then title and culprit.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from ephyra.core.states import Severity
from ephyra.redaction.redact import SECRET_PLACEHOLDER, is_secret_key, redact, redact_lines
from ephyra.telemetry.fingerprint import FINGERPRINT_VERSION, fingerprint, frame_key
from ephyra.telemetry.stack import Frame, ParsedStack, detect_language, normalise_path, parse_stack

Signal = Literal["logs", "traces"]

# Cuts, applied after redaction (a cut never splits a secret the rules would have found).
MAX_MESSAGE = 8 * 1024
MAX_STACKTRACE = 64 * 1024
MAX_VALUE = 2 * 1024
MAX_ATTRIBUTES = 64
MAX_REASONS = 5

# The longest each stored text of a candidate may be, in characters: ingest cuts the field to
# it last (after redaction, which can lengthen a text), and intake's ``IngestedSignal`` columns
# take their ``max_length`` from this table, so no field is ever longer than its column (one
# that was lost its whole export to the database's refusal).
FIELD_LIMITS: Mapping[str, int] = MappingProxyType(
    {
        "title": 200,
        "culprit": MAX_VALUE,
        "exception_type": 1000,
        "message": MAX_MESSAGE,
        "service": 1000,
        "service_version": 1000,
        "environment": 1000,
    }
)
MAX_TITLE = FIELD_LIMITS["title"]

ERROR_SEVERITY_NUMBER = 17  # SEVERITY_NUMBER_ERROR; 21 and up are FATAL
_ERROR_TEXT = re.compile(r"(?i)(?:ERROR|ERR|SEVERE)\d?")
_FATAL_TEXT = re.compile(r"(?i)(?:FATAL|CRITICAL|CRIT|EMERGENCY|EMERG|ALERT|PANIC)\d?")

# Attribute names read (OpenTelemetry semantic conventions).
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"
EXCEPTION_STACKTRACE = "exception.stacktrace"
SERVICE_NAME = "service.name"
SERVICE_VERSION = "service.version"
ENVIRONMENT = ("deployment.environment.name", "deployment.environment")
SDK_LANGUAGE = "telemetry.sdk.language"
_EXCEPTION_KEYS = frozenset({EXCEPTION_TYPE, EXCEPTION_MESSAGE, EXCEPTION_STACKTRACE})


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """Per-workspace knobs. ``path_roots`` are stripped from frame paths (longest first) so
    paths match the repository; ``in_app_include``/``in_app_exclude`` are prefixes of a frame's
    module or normalised path that force it in or out of the app (include wins)."""

    path_roots: tuple[str, ...] = ()
    in_app_include: tuple[str, ...] = ()
    in_app_exclude: tuple[str, ...] = ()


DEFAULT_OPTIONS = IngestOptions()


_NONE: Mapping[str, str] = MappingProxyType({})


class SignalCandidate(NamedTuple):
    """One error, redacted and fingerprinted, ready for triage. Every text field is redacted.
    A named tuple, not a frozen dataclass: one is built per error, and a tuple is built in one
    step where a frozen dataclass sets its fields one call at a time."""

    source: Literal["log", "span_event"]
    severity: Severity
    fingerprint: str
    fingerprint_version: int
    title: str
    culprit: str  # the innermost in-app frame, "<module or path> in <function>"
    exception_type: str
    message: str
    stacktrace: str
    language: str
    frames: tuple[Frame, ...]  # innermost first
    paths: tuple[str, ...]  # normalised paths of the in-app frames, innermost first, no repeats
    service: str
    service_version: str
    environment: str
    logger: str  # the instrumentation scope's name
    trace_id: str  # 32 lowercase hex digits, or ""
    span_id: str  # 16 lowercase hex digits, or ""
    time_unix_nano: int  # 0 when the sender gave no time
    body: str = ""  # the log record's body when it is not the message itself
    attributes: Mapping[str, str] = _NONE
    resource: Mapping[str, str] = _NONE

    @property
    def at(self) -> datetime | None:
        if not self.time_unix_nano:
            return None
        return datetime.fromtimestamp(self.time_unix_nano / 1e9, tz=UTC)

    def texts(self) -> list[str]:
        """Every text the candidate carries (for checks that nothing unredacted leaves)."""
        out = [self.title, self.culprit, self.exception_type, self.message, self.stacktrace]
        out += [self.body, self.service, self.service_version, self.environment, self.logger]
        out += [*self.paths, *self.attributes, *self.attributes.values()]
        out += [*self.resource, *self.resource.values()]
        for f in self.frames:
            out += [f.file, f.function, f.module or ""]
        return out


@dataclass(frozen=True, slots=True)
class ParseResult:
    """What one OTLP request held. ``records`` counts log records (logs) or spans (traces);
    ``rejected`` of them were unusable (the partial-success count), ``dropped`` were valid but
    not errors. A span may carry several exception events, so ``len(candidates)`` can exceed
    ``records - dropped - rejected``."""

    signal: Signal
    candidates: tuple[SignalCandidate, ...]
    records: int
    dropped: int
    rejected: int
    rejection: str  # a human sentence naming the first few rejected records and why; "" if none

    @property
    def accepted(self) -> int:
        return self.records - self.rejected


class Unusable(Exception):
    """A record the sender must fix: becomes a rejection, never escapes the package."""


@dataclass(slots=True)
class Tally:
    """What a walk over one request found. The walkers add each error record (or span, with its
    exception events) as it comes, or why it is rejected, with where it was (``prefix[index]``);
    ``result`` builds the candidates of them all at once (``build_candidates``) and counts."""

    signal: Signal
    options: IngestOptions = DEFAULT_OPTIONS
    records: int = 0
    dropped: int = 0
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)
    candidates: list[SignalCandidate] = field(default_factory=list)
    pending: list[tuple[str, int, list[Raw], str]] = field(default_factory=list)

    def add(self, prefix: str, index: int, raws: list[Raw], reason: str = "") -> None:
        """A record's or span's errors; with ``reason``, why the one after the last of them
        could not be decoded (the span is rejected, for the first of them that is unusable
        if there is one, as if each were built before the next was read)."""
        self.pending.append((prefix, index, raws, reason))

    def reject(self, prefix: str, index: int, reason: str) -> None:
        self.pending.append((prefix, index, [], reason))

    def _count_rejection(self, prefix: str, index: int, reason: str) -> None:
        self.rejected += 1
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(f"{prefix}[{index}]: {reason}")

    def _build(self) -> None:
        pending, self.pending = self.pending, []
        built = iter(
            build_candidates([raw for _, _, raws, _ in pending for raw in raws], self.options)
        )
        for prefix, index, raws, reason in pending:
            found = [next(built) for _ in raws]
            # a span with one unusable exception event is rejected whole, as the sender sent it
            error = next((f for f in found if isinstance(f, Unusable)), None)
            if error is not None:
                self._count_rejection(prefix, index, str(error))
            elif reason:
                self._count_rejection(prefix, index, reason)
            else:
                self.candidates.extend(found)  # type: ignore[arg-type]

    def result(self) -> ParseResult:
        self._build()
        rejection = ""
        if self.rejected:
            unit = "log records" if self.signal == "logs" else "spans"
            rejection = f"{self.rejected} of {self.records} {unit} rejected: " + "; ".join(
                self.reasons
            )
            if self.rejected > len(self.reasons):
                rejection += f"; and {self.rejected - len(self.reasons)} more"
        return ParseResult(
            self.signal,
            tuple(self.candidates),
            self.records,
            self.dropped,
            self.rejected,
            rejection,
        )


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    service: str
    service_version: str
    environment: str
    language: str
    attributes: Mapping[str, str]  # redacted, stringified


def log_severity(number: int, text: str) -> Severity | None:
    """ERROR for severity 17-20, FATAL for 21-24; by text only when the number is unset."""
    if number:
        if number >= 21:
            return Severity.FATAL
        return Severity.ERROR if number >= ERROR_SEVERITY_NUMBER else None
    if text:
        text = text.strip()
        if _FATAL_TEXT.fullmatch(text):
            return Severity.FATAL
        if _ERROR_TEXT.fullmatch(text):
            return Severity.ERROR
    return None


# -- text -----------------------------------------------------------------------------------


def clean(text: str) -> str:
    """No NUL (PostgreSQL refuses it) and no lone surrogate (JSON can smuggle one in)."""
    if text.isascii():  # a flag of the string, no scan: ASCII holds no surrogate
        return text.replace("\x00", "\ufffd") if "\x00" in text else text
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    open_at = head.rfind("[redacted:")
    if open_at >= 0 and "]" not in head[open_at:]:
        head = head[:open_at]  # never leave half a placeholder
    return head + "…"


def _masked(value: Any, depth: int = 0) -> Any:
    """Nested maps with their secret-named keys' values replaced, before they become JSON."""
    if isinstance(value, dict):
        return {
            k: SECRET_PLACEHOLDER if is_secret_key(k) else _masked(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked(v, depth + 1) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def value_text(value: Any) -> str:
    """An attribute or body value as text (before redaction): strings as they are, maps and
    arrays as compact JSON, bytes as base64, booleans as ``true``/``false``."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return json.dumps(_masked(value), ensure_ascii=False, separators=(",", ":"), default=str)


def redacted_text(value: Any, limit: int) -> str:
    """``cut(redact(clean(value_text(value))), limit)``, with value_text, clean and cut inline
    for the usual value (ASCII text, short enough): every field of every record comes here."""
    text = value if type(value) is str else value_text(value)
    if not text.isascii() or "\x00" in text:
        text = clean(text)
    text = redact(text)
    return text if len(text) <= limit else cut(text, limit)


# Attribute names recur in every record: each one's redacted form and whether it names a secret,
# remembered (in memory only, like redaction's line cache).
_KEYS: dict[str, tuple[str, bool]] = {}
_KEYS_SIZE = 4096


def _key(key: str) -> tuple[str, bool]:
    found = _KEYS.get(key)
    if found is None:
        found = cut(redact(clean(key)), MAX_VALUE), is_secret_key(key)
        if len(_KEYS) >= _KEYS_SIZE:
            _KEYS.clear()
        _KEYS[key] = found
    return found


def redacted_attributes(
    values: Mapping[str, Any], skip: frozenset[str] = frozenset()
) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in values.items():
        if key in skip:
            continue
        if len(out) == MAX_ATTRIBUTES:
            break
        safe_key, secret = _KEYS.get(key) or _key(key)
        if secret:
            out[safe_key] = SECRET_PLACEHOLDER
            continue
        out[safe_key] = redacted_text(value, MAX_VALUE)
    return out


def resource_info(attributes: Mapping[str, Any]) -> ResourceInfo:
    def text(key: str, field: str) -> str:
        return redacted_text(attributes.get(key), FIELD_LIMITS[field])

    environment = next(
        (text(k, "environment") for k in ENVIRONMENT if attributes.get(k) is not None), ""
    )
    return ResourceInfo(
        service=text(SERVICE_NAME, "service"),
        service_version=text(SERVICE_VERSION, "service_version"),
        environment=environment,
        language=value_text(attributes.get(SDK_LANGUAGE)).lower(),
        attributes=redacted_attributes(attributes),
    )


# -- candidates -----------------------------------------------------------------------------


def _in_app(frames: tuple[Frame, ...], options: IngestOptions) -> tuple[Frame, ...]:
    if not (options.in_app_include or options.in_app_exclude):
        return frames
    out = []
    for f in frames:
        key = frame_key(f, options.path_roots)
        if key.startswith(options.in_app_include) and options.in_app_include:
            f = dataclasses.replace(f, in_app=True)
        elif options.in_app_exclude and key.startswith(options.in_app_exclude):
            f = dataclasses.replace(f, in_app=False)
        out.append(f)
    return tuple(out)


def _frame_path(frame: Frame, language: str, roots: tuple[str, ...]) -> str:
    if language == "java" and frame.module:
        package = frame.module.rpartition(".")[0]
        return f"{package.replace('.', '/')}/{frame.file}" if package else frame.file
    return normalise_path(frame.file, roots)


def _title(exception_type: str, message: str) -> str:
    first = " ".join(message.strip().split("\n", 1)[0].split()) if message else ""
    if exception_type and first:
        text = f"{exception_type}: {first}"
    else:
        text = exception_type or first or "(no message)"
    return cut(text, MAX_TITLE)


class Raw(NamedTuple):
    """An error log record or exception event as decoded, before anything is redacted.
    ``attributes`` are the record's or the event's; ``extra`` the span's (the event's own win)."""

    source: Literal["log", "span_event"]
    severity: Severity
    attributes: Mapping[str, Any]
    resource: ResourceInfo
    logger: str
    trace_id: str
    span_id: str
    time_unix_nano: int
    body: Any = None
    extra: Mapping[str, Any] | None = None


def build_candidates(raws: list[Raw], options: IngestOptions) -> list[SignalCandidate | Unusable]:
    """A candidate for each raw error, or why it cannot be one, in order. Field by field across
    all of them (each field's texts redacted in a row; then the stack traces parsed; then the
    fingerprints and titles), then the rest record by record. The same rules and parsers over
    similar texts, one after another, keep the processor's caches warm: a quarter less CPU a
    record than building each record whole (``benchmarks/ingest.py``)."""
    types = [redacted_text(r.attributes.get(EXCEPTION_TYPE), MAX_VALUE) for r in raws]
    messages = [redacted_text(r.attributes.get(EXCEPTION_MESSAGE), MAX_MESSAGE) for r in raws]
    # The redacted lines go to the stack parser as they are (no split of the joined text).
    traces = [redact_lines(clean(value_text(r.attributes.get(EXCEPTION_STACKTRACE)))) for r in raws]
    bodies = [redacted_text(r.body, MAX_MESSAGE) if r.body is not None else "" for r in raws]
    attributes = [
        redacted_attributes(
            {**r.extra, **r.attributes} if r.extra else r.attributes, _EXCEPTION_KEYS
        )
        for r in raws
    ]
    texts = [_stack_text(*row) for row in zip(messages, traces, bodies, strict=True)]
    parsed = [
        parse_stack(stacktrace, r.resource.language, lines)
        for r, (_, stacktrace, lines, _) in zip(raws, texts, strict=True)
    ]
    facts = [
        _facts(exc_type, text[0], stack, options, body=text[3])
        for exc_type, text, stack in zip(types, texts, parsed, strict=True)
    ]
    usable = [f for f in facts if not isinstance(f, Unusable)]
    roots = options.path_roots
    digests = iter([fingerprint(t, frames, m, roots) for t, m, frames in usable])
    # the title is redacted again: joining a type and a message's first line must not form one
    # (and cut again, as a placeholder can be longer than what it replaced)
    titles = iter([cut(redact(_title(t, m)), MAX_TITLE) for t, m, _ in usable])
    out: list[SignalCandidate | Unusable] = []
    for raw, fact, text, stack, attrs in zip(raws, facts, texts, parsed, attributes, strict=True):
        if isinstance(fact, Unusable):
            out.append(fact)
        else:
            out.append(
                _candidate(raw, fact, next(digests), next(titles), text, stack, attrs, options)
            )
    return out


def _facts(
    exc_type: str, message: str, parsed: ParsedStack, options: IngestOptions, body: str = ""
) -> tuple[str, str, tuple[Frame, ...]] | Unusable:
    """(exception type, message, frames with in-app as the options say), or why not."""
    if not exc_type:
        exc_type = parsed.exception_type
    # Python's OpenTelemetry SDK sends str(args[0]) as the message ('ascii' of a
    # UnicodeEncodeError); the stack trace's last line holds str(exception) whole.
    if not message or (parsed.message and message in parsed.message):
        message = parsed.message
    if not (exc_type or message or parsed.frames):
        message = body  # a stack trace that says nothing: the log's body is all there is
    if not (exc_type or message or parsed.frames):
        return Unusable("an error record with no body and no exception attributes")
    return exc_type, message, _in_app(parsed.frames, options)


def _stack_text(
    message: str, lines: list[str], body_text: str
) -> tuple[str, str, list[str] | None, str]:
    """(message, stack trace, its lines or None, body) as the candidate has them."""
    stacktrace = "\n".join(lines)
    lines_or_none: list[str] | None = lines
    if len(stacktrace) > MAX_STACKTRACE:
        stacktrace, lines_or_none = cut(stacktrace, MAX_STACKTRACE), None
    if not stacktrace and body_text and detect_language(body_text):
        stacktrace, body_text = body_text, ""  # a trace logged as plain text (stderr, filelog)
        lines_or_none = None
    # A log's body is its message only when it carries no stack trace: the trace of an
    # exception without one (a bare StopIteration) says it has none.
    if not message and body_text and not stacktrace:
        message, body_text = body_text, ""
    return message, stacktrace, lines_or_none, body_text


def _candidate(
    raw: Raw,
    facts: tuple[str, str, tuple[Frame, ...]],
    digest: str,
    title: str,
    text: tuple[str, str, list[str] | None, str],
    parsed: ParsedStack,
    attributes: dict[str, str],
    options: IngestOptions,
) -> SignalCandidate:
    exc_type, message, frames = facts
    _, stacktrace, _, body_text = text
    resource = raw.resource
    roots = options.path_roots
    top = next((f for f in frames if f.in_app), frames[0] if frames else None)
    culprit = f"{frame_key(top, roots)} in {top.function}" if top else ""
    paths = tuple(dict.fromkeys(_frame_path(f, parsed.language, roots) for f in frames if f.in_app))
    return SignalCandidate(
        source=raw.source,
        severity=raw.severity,
        fingerprint=digest,
        fingerprint_version=FINGERPRINT_VERSION,
        title=title,
        culprit=cut(culprit, FIELD_LIMITS["culprit"]),
        # both may come whole from the stack trace; the fingerprint was made from the uncut ones
        exception_type=cut(exc_type, FIELD_LIMITS["exception_type"]),
        message=cut(message, FIELD_LIMITS["message"]),
        stacktrace=stacktrace,
        language=parsed.language,
        frames=frames,
        paths=paths,
        service=resource.service,
        service_version=resource.service_version,
        environment=resource.environment,
        logger=redacted_text(raw.logger, MAX_VALUE),
        trace_id=raw.trace_id,
        span_id=raw.span_id,
        time_unix_nano=raw.time_unix_nano,
        body=body_text,
        attributes=attributes,
        resource=resource.attributes,
    )
