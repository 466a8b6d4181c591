"""Output: captured to a capped file (head and tail, the cut said), excerpted, digested."""

from __future__ import annotations

import hashlib
import inspect
import json
from pathlib import Path

from ephyra.runner import read_record
from tests.runner.conftest import needs_python

MB = 1024 * 1024


def stream(size: int):
    """Numbered lines, "line 00000000\\n" (14 bytes each), padded with "x" to ``size``."""
    lines = size // 14
    for start in range(0, lines, 10000):
        yield b"".join(b"line %08d\n" % n for n in range(start, min(start + 10000, lines)))
    yield b"x" * (size - lines * 14)


def printing(size: int) -> list[str]:
    """The command that prints ``size`` bytes of the same stream."""
    code = f"import sys\n{inspect.getsource(stream)}\n"
    code += f"for chunk in stream({size}): sys.stdout.buffer.write(chunk)"
    return ["python3", "-c", code]


def expected(size: int, keep: int) -> tuple[bytes, bytes, str]:
    """The first and the last ``keep`` bytes of the stream, and its SHA-256."""
    digest, head, tail = hashlib.sha256(), b"", b""
    for chunk in stream(size):
        digest.update(chunk)
        if len(head) < keep:
            head += chunk[: keep - len(head)]
        tail = (tail + chunk)[-keep:]
    return head, tail, digest.hexdigest()


@needs_python
def test_a_command_that_prints_100_mb_keeps_only_its_head_and_tail(runner, make_request):
    size = 100 * MB
    result = runner.run(make_request(printing(size), output_bytes=2 * MB, wall_seconds=300))

    head, tail, digest = expected(size, MB)
    assert result.ok  # not slowed into its wall-clock limit by the capture
    assert (result.output_size, result.output_sha256) == (size, digest)
    kept = Path(result.output_path).read_bytes()
    cut = size - 2 * MB
    assert result.output_cut == cut
    said = f"\n[ephyra runner: {cut:,} bytes cut here, of {size:,} in all]\n".encode()
    assert kept == head + said + tail
    assert len(kept) == 2 * MB + len(said)


@needs_python
def test_the_excerpt_of_a_long_output_is_its_head_and_tail_with_the_cut_said(runner, make_request):
    size = 3 * MB
    result = runner.run(make_request(printing(size)))

    head, tail, _ = expected(size, 12 * 1024)
    excerpt = result.output_excerpt
    first, said, last = excerpt.partition(f"\n[ephyra runner: {size - 16 * 1024:,} bytes cut")
    assert said
    assert first == head[: 4 * 1024].decode()
    assert last.endswith(tail.decode())
    assert last.startswith(f" here, of {size:,} in all]\n")


def test_a_short_output_is_kept_whole(runner, make_request):
    result = runner.run(make_request(["sh", "-c", "echo out; echo err >&2; echo more"]))

    assert result.output_excerpt == "out\nerr\nmore\n"  # stdout and stderr, in order
    assert Path(result.output_path).read_text() == "out\nerr\nmore\n"
    assert result.output_cut == 0
    assert result.output_sha256 == hashlib.sha256(b"out\nerr\nmore\n").hexdigest()


def test_bytes_that_are_not_text_are_replaced_in_the_excerpt_not_in_the_file(runner, make_request):
    result = runner.run(make_request(["printf", "ok \\377 \\000 end"]))

    assert result.output_excerpt == "ok \ufffd \ufffd end"
    assert Path(result.output_path).read_bytes() == b"ok \xff \x00 end"


def test_each_run_is_recorded_beside_its_output_without_the_values_of_its_environment(
    runner, make_request, artifacts
):
    request = make_request(
        ["sh", "-c", "echo hello; exit 3"], name="reproduce-1", env={"API_KEY": "sk-not-stored"}
    )

    result = runner.run(request)

    record = artifacts / "reproduce-1.json"
    assert result.output_path == str(artifacts / "reproduce-1.log")
    assert read_record(record) == result
    stored = json.loads(record.read_text())
    assert stored["argv"] == ["sh", "-c", "echo hello; exit 3"]
    assert stored["exit_code"] == 3
    assert stored["output_excerpt"] == "hello\n"
    assert stored["limits"]["wall_seconds"] == 600.0
    assert "API_KEY" in stored["env_names"]
    assert "sk-not-stored" not in record.read_text()
    assert stored["runner"] == runner.name


def test_a_run_under_the_same_name_replaces_the_earlier_artifacts(runner, make_request, artifacts):
    runner.run(make_request(["echo", "first"], name="setup"))
    second = runner.run(make_request(["echo", "second"], name="setup"))

    assert sorted(path.name for path in artifacts.iterdir()) == ["setup.json", "setup.log"]
    assert read_record(artifacts / "setup.json") == second
    assert (artifacts / "setup.log").read_text() == "second\n"
