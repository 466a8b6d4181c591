"""Stack traces of four languages into frames, innermost first; nonsense into no frames."""

from __future__ import annotations

import traceback

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ephyra.telemetry import Frame, detect_language, normalise_path, parse_stack
from tests.telemetry import shop
from tests.telemetry.otel import ROOT, fixture, raised


def test_a_real_python_traceback_reads_innermost_first_with_its_exception():
    text = "".join(traceback.format_exception(raised(shop.checkout, [])))
    parsed = parse_stack(text)
    assert parsed.language == "python"
    assert (parsed.exception_type, parsed.message) == ("ZeroDivisionError", "division by zero")
    first = parsed.frames[0]
    assert first == Frame(
        str(ROOT / "tests/telemetry/shop.py"), first.line, "average_price", None, True
    )
    assert [f.function for f in parsed.frames[:3]] == ["average_price", "checkout", "raised"]


def test_python_chained_exceptions_read_the_one_that_escaped():
    try:
        try:
            shop.lookup("SKU-9")
        except KeyError as error:
            raise RuntimeError("catalogue unavailable") from error
    except RuntimeError as error:
        text = "".join(traceback.format_exception(error))
    parsed = parse_stack(text, "python")
    assert "The above exception was the direct cause" in text
    assert (parsed.exception_type, parsed.message) == ("RuntimeError", "catalogue unavailable")
    assert "lookup" not in [f.function for f in parsed.frames]


def test_python_library_and_standard_library_frames_are_not_in_app():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/app/shop/views.py", line 12, in checkout\n'
        '  File "/app/.venv/lib/python3.12/site-packages/django/db/models/query.py",'
        " line 9, in get\n"
        '  File "/usr/lib/python3.12/json/decoder.py", line 353, in raw_decode\n'
        '  File "<frozen importlib._bootstrap>", line 1204, in _gcd_import\n'
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n"
    )
    frames = parse_stack(text).frames
    assert [(f.module, f.in_app) for f in frames] == [
        (None, False),
        ("json.decoder", False),
        ("django.db.models.query", False),
        (None, True),
    ]
    assert parse_stack(text).exception_type == "json.decoder.JSONDecodeError"


def test_java_reads_the_top_exception_and_skips_libraries_and_generated_classes():
    parsed = parse_stack(fixture("java_spring.txt"))
    assert parsed.language == "java"
    assert parsed.exception_type == "java.lang.IllegalStateException"
    assert parsed.message == "cart 81723 has no lines"
    in_app = [(f.module, f.function, f.line) for f in parsed.frames if f.in_app]
    assert in_app == [
        ("com.acme.shop.checkout.CheckoutService", "total", 42),
        ("com.acme.shop.checkout.CheckoutController", "lambda$checkout$0", 31),
        ("com.acme.shop.checkout.CheckoutController", "checkout", 30),
    ]
    assert "HikariPool" not in repr(parsed.frames)  # the cause's frames are not the top's
    assert parsed.frames[3] == Frame("Optional.java", 260, "map", "java.util.Optional", False)
    main = parse_stack(fixture("java_main.txt"))
    assert main.exception_type == "java.lang.NullPointerException"
    assert main.message.startswith('Cannot invoke "String.length()"')


def test_node_v8_frames_with_and_without_function_names():
    parsed = parse_stack(fixture("node_v8.txt"))
    assert parsed.language == "javascript"
    assert parsed.exception_type == "TypeError"
    assert parsed.message == "Cannot read properties of undefined (reading 'price')"
    assert [(f.function, f.line, f.in_app) for f in parsed.frames] == [
        ("lineTotal", 14, True),
        ("Array.map", None, False),
        ("cartTotal", 22, True),
        ("checkout", 31, True),
        ("Layer.handle [as handle_request]", 95, False),
        ("<anonymous>", 40, True),
        ("process.processTicksAndRejections", 95, False),
    ]
    assert parsed.frames[0].file == "/srv/app/src/cart/total.js"


def test_firefox_frames_and_their_urls():
    parsed = parse_stack(fixture("firefox.txt"))
    assert parsed.language == "javascript"
    assert [(f.function, f.line) for f in parsed.frames] == [
        ("renderCart", 120),
        ("onClick", 88),
        ("<anonymous>", 2),
    ]
    assert normalise_path(parsed.frames[0].file) == "assets/app.js"  # host and build hash gone


def test_go_reads_the_panicking_goroutine_only():
    parsed = parse_stack(fixture("go_panic.txt"))
    assert parsed.language == "go"
    assert parsed.exception_type == "panic"
    assert parsed.message == "runtime error: invalid memory address or nil pointer dereference"
    assert [(f.module, f.function, f.line, f.in_app) for f in parsed.frames] == [
        ("github.com/acme/shop/internal/cart", "(*Cart).Total", 57, True),
        ("github.com/acme/shop/internal/api", "(*Server).checkout", 88, True),
        ("net/http", "HandlerFunc.ServeHTTP", 2220, False),
        ("github.com/go-chi/chi/v5", "(*Mux).routeHTTP", 444, False),
        ("net/http", "(*Server).Serve", 3360, False),
    ]
    assert "runtime_pollWait" not in repr(parsed.frames)


@pytest.mark.parametrize(
    ("first_line", "kind", "message"),
    [
        ("panic: boom [recovered]", "panic", "boom"),
        ("panic: boom [recovered] [recovered]", "panic", "boom [recovered]"),
        ("panic: [recovered] boom", "panic", "[recovered] boom"),
        ("fatal error: concurrent map writes", "fatal error", "concurrent map writes"),
        ("worker 3 panic:  spaced out  ", "panic", "spaced out"),
    ],
)
def test_a_go_panic_line_gives_the_type_and_message_less_one_recovered_mark(
    first_line, kind, message
):
    text = f"{first_line}\n\ngoroutine 7 [running]:\nmain.main()\n\t/src/main.go:9 +0x1d\n"
    parsed = parse_stack(text, "go")
    assert (parsed.exception_type, parsed.message) == (kind, message)


def test_the_language_is_detected_from_the_shape_when_no_hint_fits():
    for name, language in [
        ("java_spring.txt", "java"),
        ("node_v8.txt", "javascript"),
        ("firefox.txt", "javascript"),
        ("go_panic.txt", "go"),
    ]:
        text = fixture(name)
        assert detect_language(text) == language
        assert parse_stack(text, "python").language == language  # a wrong hint is overruled
        assert parse_stack(text, "cobol").language == language


def test_paths_lose_hosts_roots_virtualenvs_and_module_versions():
    cases = {
        "/app/shop/views.py": "shop/views.py",
        "/srv/app/src/cart/total.js": "src/cart/total.js",
        "/home/alice/shop/cart.go": "shop/cart.go",
        "C:\\Users\\bob\\shop\\views.py": "shop/views.py",
        "/usr/local/lib/python3.12/site-packages/django/core/handlers/base.py": (
            "django/core/handlers/base.py"
        ),
        "/go/pkg/mod/github.com/lib/pq@v1.10.9/conn.go": "github.com/lib/pq/conn.go",
        "/usr/local/go/src/net/http/server.go": "net/http/server.go",
        "webpack:///./src/App.tsx?abc": "src/App.tsx",
        "https://cdn.example.com/static/js/main.8f3a2c1d.js": "static/js/main.js",
        "relative/path.py": "relative/path.py",
    }
    for raw, expected in cases.items():
        assert normalise_path(raw) == expected, raw
    assert normalise_path("/opt/build/repo/shop/views.py", ("/opt/build/repo",)) == "shop/views.py"


def test_text_that_is_not_a_trace_gives_no_frames():
    for text in ["", "just a sentence", "at noon we met", "File not found", "x@y:1:2 z"]:
        assert parse_stack(text).frames == ()


@given(st.text(max_size=2000), st.sampled_from(["", "python", "java", "nodejs", "go", "rust"]))
def test_no_text_makes_the_parser_raise(text, language):
    parsed = parse_stack(text, language)
    assert all(isinstance(f, Frame) for f in parsed.frames)


@given(
    st.lists(
        st.sampled_from(
            [
                "Traceback (most recent call last):",
                '  File "/app/x.py", line 1, in f',
                "    at f (/a.js:1:2)",
                "\tat a.B.c(B.java:3)",
                "goroutine 1 [running]:",
                "main.main()",
                "\t/app/main.go:3 +0x1",
                "Caused by: x",
                "ValueError: bad",
                "",
            ]
        ),
        max_size=30,
    )
)
def test_mixed_up_trace_lines_never_make_the_parser_raise(lines):
    parse_stack("\n".join(lines))
