"""Stack traces as text → frames, for Python, JavaScript (V8 and Firefox), Java and Go.

``parse_stack`` never raises: text it does not understand gives no frames. Frames are ordered
innermost first (the frame that raised, then its caller…), whatever order the language prints
them in. Of a chained exception only the reported one is read: Python's last traceback (the
exception that escaped), Java's first block (before ``Caused by:``), Go's panicking goroutine.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

Language = Literal["python", "javascript", "java", "go", ""]

# telemetry.sdk.language values (and a few runtimes) mapped to the parser that reads their traces.
SDK_LANGUAGES: dict[str, Language] = {
    "python": "python",
    "nodejs": "javascript",
    "webjs": "javascript",
    "javascript": "javascript",
    "java": "java",
    "kotlin": "java",
    "scala": "java",
    "go": "go",
}


@dataclass(frozen=True, slots=True)
class Frame:
    file: str  # as printed (after redaction): an absolute path, a URL, or ``Foo.java``
    line: int | None
    function: str
    module: str | None  # Python/Java/Go module, class or package when the trace names one
    in_app: bool


@dataclass(frozen=True, slots=True)
class ParsedStack:
    language: Language
    frames: tuple[Frame, ...]  # innermost first
    exception_type: str = ""  # as the trace text states it, when it does
    message: str = ""


_EMPTY = ParsedStack("", ())

# -- paths ----------------------------------------------------------------------------------

_URL_PREFIX = re.compile(r"^[A-Za-z][\w+.-]*://[^/]*")
_DRIVE = re.compile(r"^[A-Za-z]:(?=/)")
_PY_STDLIB = re.compile(r"/lib/python\d+(?:\.\d+)?t?/")
_GOROOT = re.compile(r"/(?:go|go-?\d[\w.]*|golang)/src/")
_GO_MOD_VERSION = re.compile(r"@v[^/]*")
_BUILD_HASH = re.compile(r"[.-][0-9a-f]{8,}(?=\.[A-Za-z]+$)")
# Where applications live in containers, CI runners, serverless and home directories: stripped
# so the same code on two hosts gives the same path.
_ROOTS = re.compile(
    r"^/(?:home/runner/work/[^/]+/[^/]+|builds/[^/]+/[^/]+|github/workspace|usr/src/app"
    r"|usr/src|var/task|var/www/html|var/www|opt/app|opt/[^/]+|srv/app|srv|app|code|src"
    r"|workspace|workdir|build|home/[^/]+|Users/[^/]+|root|tmp)/"
)
_THIRD_PARTY = ("/site-packages/", "/dist-packages/", "/node_modules/")


@lru_cache(maxsize=8192)
def normalise_path(file: str, roots: tuple[str, ...] = ()) -> str:
    """A host-independent path: no scheme or host, no query, no virtualenv, module cache or
    container root, no build hash in the file name. ``roots`` are stripped first, longest first.
    """
    path = file.replace("\\", "/")
    if "://" in path:
        path = _URL_PREFIX.sub("", path)
    path = path.split("?", 1)[0].split("#", 1)[0]
    path = _DRIVE.sub("", path)
    for root in sorted(roots, key=len, reverse=True):
        prefix = root.rstrip("/") + "/"
        if path.startswith(prefix):
            return _BUILD_HASH.sub("", path[len(prefix) :])
    for marker in _THIRD_PARTY:
        if marker in path:
            return path.rsplit(marker, 1)[1]
    if "/pkg/mod/" in path:
        return _GO_MOD_VERSION.sub("", path.rsplit("/pkg/mod/", 1)[1])
    for pattern in (_PY_STDLIB, _GOROOT):
        found = pattern.search(path)
        if found:
            return path[found.end() :]
    path = _ROOTS.sub("", path).lstrip("/")
    while path.startswith("./"):
        path = path[2:].lstrip("/")
    return _BUILD_HASH.sub("", path)


# -- Python ---------------------------------------------------------------------------------
# Patterns start with a literal ("File ", "at ") so the regular expression engine can jump from
# one candidate to the next instead of trying every position; a frame line recurs in every
# occurrence of an error, so what it says about itself is remembered (``_FRAME_CACHE``).

_PY_HEADER = "Traceback (most recent call last):"
_PY_FRAME = re.compile(r'File "(?P<file>[^"\n]+)", line (?P<line>[0-9]+)(?:, in (?P<func>[^\n]*))?')
_EXC_LINE = re.compile(r"(?P<type>[A-Za-z_$][\w$.]*(?:\[[^\]\n]*\])?)(?::[ \t]?(?P<msg>.*))?")
_FRAME_CACHE: dict[tuple[str, ...], Frame] = {}
_FRAME_CACHE_SIZE = 8192
_UNSEEN = object()


def _remember(key: tuple[str, ...], frame: Frame) -> Frame:
    if len(_FRAME_CACHE) >= _FRAME_CACHE_SIZE:
        _FRAME_CACHE.clear()
    _FRAME_CACHE[key] = frame
    return frame


def _python_module(path: str) -> str | None:
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.rsplit(marker, 1)[1].removesuffix(".py").replace("/", ".")
    found = _PY_STDLIB.search(path)
    if found:
        return path[found.end() :].removesuffix(".py").replace("/", ".")
    return None


def _python_frame(file: str, line: str, func: str) -> Frame:
    key = ("py", file, line, func)
    frame = _FRAME_CACHE.get(key)
    if frame is None:
        path = file.replace("\\", "/")
        module = _python_module(path)
        in_app = not (module is not None or file.startswith("<") or "/Lib/" in path)
        frame = _remember(key, Frame(file, int(line), func.strip(), module, in_app))
    return frame


def _remember_line(cache: dict[str, Frame | None], line: str, frame: Frame | None) -> None:
    if len(cache) >= _FRAME_CACHE_SIZE:
        cache.clear()
    cache[line] = frame


_PY_LINES: dict[str, Frame | None] = {}  # a line → its frame, or None: it is not a frame line


def _python_line(line: str) -> Frame | None:
    """The frame a ``File "…", line N, in f`` line names. Only the first ``File "`` of a line
    can be a frame (any later one has it before it), and only after indentation or the
    ``|``/``+``/``-`` that exception groups draw."""
    found = _PY_LINES.get(line, _UNSEEN)
    if found is _UNSEEN:
        found = None
        at = line.find('File "')
        if at >= 0 and not line[:at].strip(" \t|+-"):
            m = _PY_FRAME.match(line, at)
            if m is not None:
                found = _python_frame(m["file"], m["line"], m["func"] or "")
        _remember_line(_PY_LINES, line, found)
    return found  # type: ignore[return-value]


def _python(text: str, lines: list[str]) -> ParsedStack:
    # Of a chained exception, the last traceback: its header may sit inside a line.
    start = text.rfind(_PY_HEADER)
    body = lines
    if start >= 0:
        row = text.count("\n", 0, start)
        column = start - (text.rfind("\n", 0, start) + 1)
        body = [lines[row][column:], *lines[row + 1 :]]
    frames = []
    last = -1  # the line of the last frame
    for i, line in enumerate(body):
        frame = _python_line(line)
        if frame is not None:
            frames.append(frame)
            last = i
    exc_type = message = ""
    for line in body[max(last, 0) + 1 :]:
        if not line.strip() or line[:1] in " \t|":
            continue
        found = _EXC_LINE.fullmatch(line.strip())
        if found:
            exc_type, message = found["type"], (found["msg"] or "").strip()
        break
    frames.reverse()  # Python prints the innermost call last
    return ParsedStack("python", tuple(frames), exc_type, message)


# -- JavaScript -----------------------------------------------------------------------------

_GECKO_FRAME = re.compile(r"^(?P<func>[^@\s]*)@(?P<loc>\S+?:\d+:\d+)[ \t]*$", re.M)
_LOCATION = re.compile(r"(?P<file>.+?):(?P<line>[0-9]+)(?::[0-9]+)?")
_EVAL_LOCATION = re.compile(r"\(([^()]+:[0-9]+:[0-9]+)\)")


def _at_rest(line: str) -> str | None:
    """What follows "at " on a line that is indentation then "at " then something (the
    frame lines of V8 and Java), stripped at the end; None for any other line."""
    body = line.lstrip(" \t")
    if len(body) == len(line) or len(body) <= 3 or not body.startswith("at "):
        return None
    return body[3:].rstrip()


def _at_lines(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, text after "at ") of every line that is indentation, "at ", then a frame."""
    out = []
    for i, line in enumerate(lines):
        rest = _at_rest(line)
        if rest is not None:
            out.append((i, rest))
    return out


def _js_in_app(file: str) -> bool:
    return not (
        "/node_modules/" in file.replace("\\", "/")
        or file.startswith(("node:", "internal/", "<", "native"))
        or ("/" not in file and "\\" not in file and file.endswith(".js") and "." not in file[:-3])
    )


def _js_frame(func: str, loc: str) -> Frame:
    key = ("js", func, loc)
    frame = _FRAME_CACHE.get(key)
    if frame is not None:
        return frame
    name = func.removeprefix("async ").removeprefix("new ").strip()
    where = loc
    if where.startswith("eval at "):  # eval frames: the outermost real location closes the text
        inner = _EVAL_LOCATION.findall(where)
        where = inner[-1] if inner else where
    found = _LOCATION.fullmatch(where)
    file, line = (found["file"], int(found["line"])) if found else (where, None)
    return _remember(key, Frame(file, line, name or "<anonymous>", None, _js_in_app(file)))


def _first_error_line(lines: list[str]) -> tuple[str, str]:
    """The exception named by the lines before the first frame."""
    lines = [line.strip() for line in lines if line.strip()]
    for line in lines:
        found = _EXC_LINE.fullmatch(line)
        if found and found["msg"] is not None:
            return found["type"], found["msg"].strip()
    if lines:
        found = _EXC_LINE.fullmatch(lines[0])
        if found:
            return found["type"], ""
    return "", ""


_NOT_A_FRAME = Frame("", None, "", None, False)


def _v8_frame(rest: str) -> Frame | None:
    """``at <rest>``: ``f (file:line:col)``, ``file:line:col``, or a native/eval frame."""
    key = ("v8", rest)
    frame = _FRAME_CACHE.get(key)
    if frame is None:
        if rest.endswith(")") and " (" in rest:
            cut = rest.index(" (")
            func, loc = rest[:cut], rest[cut + 2 : -1]
        else:
            func, loc = "", rest
        is_frame = _LOCATION.fullmatch(loc) or loc.startswith(("eval at ", "<anonymous>", "native"))
        frame = _remember(key, _js_frame(func, loc) if is_frame else _NOT_A_FRAME)
    return None if frame is _NOT_A_FRAME else frame


_V8_LINES: dict[str, Frame | None] = {}  # a line → its V8 frame, or None


def _at_line(
    cache: dict[str, Frame | None], line: str, parse: Callable[[str], Frame | None]
) -> Frame | None:
    """The frame of an ``at …`` line (V8, Java), parsed once per distinct line."""
    found = cache.get(line, _UNSEEN)
    if found is _UNSEEN:
        rest = _at_rest(line)
        found = None if rest is None else parse(rest)
        _remember_line(cache, line, found)
    return found  # type: ignore[return-value]


def _javascript(text: str, lines: list[str]) -> ParsedStack:
    frames = []
    first = -1  # the line of the first frame
    for i, line in enumerate(lines):
        frame = _at_line(_V8_LINES, line, _v8_frame)
        if frame is None:
            continue
        if first < 0:
            first = i
        frames.append(frame)
    if not frames and "@" in text:  # Firefox and Safari: a frame a line, f@file:line:col
        for i, line in enumerate(lines):
            found = _GECKO_FRAME.match(line)
            if found:
                first = i if first < 0 else first
                frames.append(_js_frame(found["func"], found["loc"]))
    if not frames:
        return _EMPTY
    exc_type, message = _first_error_line(lines[:first])
    return ParsedStack("javascript", tuple(frames), exc_type, message)


# -- Java -----------------------------------------------------------------------------------

_JAVA_FRAME = re.compile(
    r"(?:[\w$.@-]+/)*(?P<cls>[\w$.]+)\.(?P<method>[\w$<>-]+)\((?P<src>[^)\n]*)\)"
)
_JAVA_HEAD = re.compile(
    r'(?:Exception in thread "[^"\n]*" )?(?P<type>[\w$.]+)(?::[ \t]?(?P<msg>.*))?'
)
_JAVA_LIBRARIES = (
    "java.", "javax.", "jakarta.", "sun.", "com.sun.", "jdk.", "kotlin.", "kotlinx.", "scala.",
    "org.springframework.", "org.apache.", "org.hibernate.", "org.eclipse.", "org.junit.",
    "org.slf4j.", "org.postgresql.", "org.glassfish.", "io.netty.", "io.grpc.", "io.micrometer.",
    "io.opentelemetry.", "io.reactivex.", "reactor.", "com.fasterxml.", "com.google.",
    "com.zaxxer.", "ch.qos.logback.", "okhttp3.", "okio.", "net.bytebuddy.", "feign.",
)  # fmt: skip


def _java_frame(rest: str) -> Frame | None:
    key = ("java", rest)
    frame = _FRAME_CACHE.get(key)
    if frame is not None:
        return frame
    m = _JAVA_FRAME.match(rest)
    if m is None:
        return None
    cls, src = m["cls"], m["src"]
    file, _, line = src.partition(":")
    generated = "$$" in cls or "$Proxy" in cls or cls.startswith("jdk.proxy")
    in_app = not (generated or cls.startswith(_JAVA_LIBRARIES))
    number = int(line) if line.isdigit() else None
    return _remember(key, Frame(file or src, number, m["method"], cls, in_app))


_JAVA_LINES: dict[str, Frame | None] = {}  # a line → its Java frame, or None


def _java(text: str, lines: list[str]) -> ParsedStack:
    # The top exception's block: up to a line that starts "Caused by:" or "Suppressed:".
    ends = [i for i in (text.find("\nCaused by:"), text.find("\nSuppressed:")) if i >= 0]
    block = lines[: text.count("\n", 0, min(ends)) + 1] if ends else lines
    frames = []
    for line in block:
        frame = _at_line(_JAVA_LINES, line, _java_frame)
        if frame is not None:
            frames.append(frame)
    if not frames:
        return _EMPTY
    exc_type = message = ""
    for line in block:
        if line.strip():
            head = _JAVA_HEAD.fullmatch(line.strip())
            if head:
                exc_type, message = head["type"], (head["msg"] or "").strip()
            break
    return ParsedStack("java", tuple(frames), exc_type, message)


# -- Go -------------------------------------------------------------------------------------

_GO_GOROUTINE = re.compile(r"goroutine [0-9]+ \[[^\]\n]*\]:")
# The message is the rest of the line, less one " [recovered]" at its end (cut in Python: a lazy
# message before an optional suffix tries the suffix at every character, ~6x slower).
_GO_PANIC = re.compile(r"(?P<type>panic|fatal error): (?P<msg>[^\n]*)")
_GO_STDLIB = frozenset(
    [
        "archive",
        "bufio",
        "builtin",
        "bytes",
        "cmp",
        "compress",
        "container",
        "context",
        "crypto",
        "database",
        "debug",
        "embed",
        "encoding",
        "errors",
        "expvar",
        "flag",
        "fmt",
        "go",
        "hash",
        "html",
        "image",
        "index",
        "internal",
        "io",
        "iter",
        "log",
        "maps",
        "math",
        "mime",
        "net",
        "os",
        "path",
        "plugin",
        "reflect",
        "regexp",
        "runtime",
        "slices",
        "sort",
        "strconv",
        "strings",
        "sync",
        "syscall",
        "testing",
        "text",
        "time",
        "unicode",
        "unique",
        "unsafe",
        "weak",
    ]
)


def _go_split(name: str) -> tuple[str, str]:
    """``github.com/acme/cart.(*Cart).Total`` → (``github.com/acme/cart``, ``(*Cart).Total``)."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1 :]


def _go_frame(call: str, place: str) -> Frame | None:
    name = call.removeprefix("created by ")
    if " in goroutine " in name:
        name = name[: name.index(" in goroutine ")]
    if name.endswith(")") and "(" in name:
        name = name[: name.rindex("(")]  # the arguments (addresses); the receiver's parens stay
    key = ("go", name, place)  # without the arguments, so each call site is remembered once
    frame = _FRAME_CACHE.get(key)
    if frame is not None:
        return frame
    file, _, line = place.strip().split(" +0x", 1)[0].rpartition(":")
    if not file or not line.isdigit() or not name:
        return None
    package, func = _go_split(name)
    path = file.replace("\\", "/")
    in_app = not (
        package.split("/", 1)[0] in _GO_STDLIB
        or "/pkg/mod/" in path
        or "/vendor/" in path
        or _GOROOT.search(path) is not None
    )
    return _remember(key, Frame(file, int(line), func, package, in_app))


def _go(text: str, lines: list[str]) -> ParsedStack:
    head = _GO_GOROUTINE.search(text)
    if head is None:
        return _EMPTY
    # What follows the header (which lies within a line), from the first line that is not empty.
    row = text.count("\n", 0, head.start())
    column = head.end() - (text.rfind("\n", 0, head.start()) + 1)
    after = [lines[row][column:], *lines[row + 1 :]]
    skip = 0
    while skip < len(after) and not after[skip]:
        skip += 1
    frames = []
    pending = ""
    for line in after[skip:]:
        if not line.strip():
            break  # the panicking goroutine ends at the first blank line
        if line.startswith("\t"):
            frame = _go_frame(pending, line) if pending else None
            if frame is not None:
                frames.append(frame)
            pending = ""
        else:
            pending = line.strip()
    if not frames:
        return _EMPTY
    panic = _GO_PANIC.search(text, 0, head.start())
    exc_type, message = (
        (panic["type"], panic["msg"].removesuffix(" [recovered]").strip()) if panic else ("", "")
    )
    return ParsedStack("go", tuple(frames), exc_type, message)


# -- detection ------------------------------------------------------------------------------

_PARSERS = {"python": _python, "javascript": _javascript, "java": _java, "go": _go}
_JAVA_SOURCE = (".java:", ".kt:", ".scala:", "(Native Method)", "(Unknown Source)")


def detect_language(text: str) -> Language:
    """The language whose trace format ``text`` has, or ``""``."""
    return _detect(text, text.split("\n"))


def _detect(text: str, lines: list[str]) -> Language:
    if 'File "' in text and any(_python_line(line) is not None for line in lines):
        return "python"
    if "goroutine " in text and _GO_GOROUTINE.search(text):
        return "go"
    if "at " in text:
        rests = [rest for _, rest in _at_lines(lines)]
        if any(marker in rest for rest in rests for marker in _JAVA_SOURCE):
            return "java"
        if any(
            rest.endswith(")") and _LOCATION.fullmatch(rest[rest.find(" (") + 2 : -1])
            for rest in rests
        ):
            return "javascript"
        if any(_LOCATION.fullmatch(rest) for rest in rests):
            return "javascript"
    if "@" in text and _GECKO_FRAME.search(text):
        return "javascript"
    return ""


def parse_stack(text: str, language: str = "", lines: list[str] | None = None) -> ParsedStack:
    """Frames of ``text``. ``language`` is a hint (a ``telemetry.sdk.language`` value is fine);
    when it is absent, unknown, or its parser finds nothing, the shape of the text decides.
    ``lines`` is ``text.split("\\n")`` when the caller has it already."""
    if not text:
        return _EMPTY
    if lines is None:
        lines = text.split("\n")
    hinted = SDK_LANGUAGES.get(language.lower(), "") if language else ""
    if hinted:
        parsed = _PARSERS[hinted](text, lines)
        if parsed.frames:
            return parsed
    detected = _detect(text, lines)
    if detected and detected != hinted:
        return _PARSERS[detected](text, lines)
    return _EMPTY
