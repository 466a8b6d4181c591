"""What every runner promises, tested on each: nothing outlives a run, limits hold, stdin is
closed, and the environment is only what the request gives."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.runner.conftest import needs_python, processes_with
from tests.waiting import wait_until


def marker() -> str:
    """A sleep length no other process on the machine uses: its command line finds it."""
    return f"1000.{uuid.uuid4().int % 10**12}"


def test_a_command_that_sleeps_past_its_limit_is_killed_with_its_children(runner, make_request):
    seconds = marker()
    # The shell starts a child shell that starts a sleep (a grandchild), then sleeps itself.
    script = f"sh -c 'sleep {seconds}' & sleep {seconds}"

    result = runner.run(make_request(["sh", "-c", script], wall_seconds=1))

    assert result.timed_out
    assert not result.ok
    assert "wall-clock limit of 1 s" in result.describe()
    assert wait_until(lambda: processes_with(seconds) == [], timeout=10)


def test_a_process_left_in_the_background_is_killed_when_the_command_ends(runner, make_request):
    seconds = marker()

    result = runner.run(make_request(["sh", "-c", f"sleep {seconds} & echo started"]))

    assert result.ok
    assert result.output_excerpt == "started\n"
    assert wait_until(lambda: processes_with(seconds) == [], timeout=10)


def test_a_command_asked_to_stop_is_killed_and_says_so(runner, make_request):
    seconds = marker()
    asked = []

    def should_stop() -> bool:
        asked.append(True)
        return len(asked) >= 2  # let it start, then stop it

    result = runner.run(make_request(["sleep", seconds]), should_stop=should_stop)

    assert result.stopped
    assert not result.timed_out
    assert not result.ok
    assert "stopped on request" in result.describe()
    assert wait_until(lambda: processes_with(seconds) == [], timeout=10)


@needs_python
def test_a_command_that_allocates_past_the_memory_limit_fails(runner, make_request):
    allocate = "data = bytearray(512 * 1024 * 1024); print('allocated')"

    result = runner.run(
        make_request(["python3", "-c", allocate], address_space_bytes=256 * 1024**2)
    )

    assert not result.ok
    assert "MemoryError" in result.output_excerpt
    assert "allocated" not in result.output_excerpt


@needs_python
def test_the_same_allocation_within_the_limit_succeeds(runner, make_request):
    allocate = "data = bytearray(64 * 1024 * 1024); print('allocated')"

    result = runner.run(
        make_request(["python3", "-c", allocate], address_space_bytes=1024 * 1024**2)
    )

    assert result.ok
    assert result.output_excerpt == "allocated\n"


@pytest.fixture
def open_stdin():
    """Our own stdin, for the test, is a pipe nobody writes to: a command that inherited it
    would wait on it forever."""
    read, write = os.pipe()
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read, write):
            os.close(fd)


@needs_python
def test_stdin_is_closed_so_a_command_that_reads_it_gets_end_of_file(
    runner, make_request, open_stdin
):
    read = "import sys; print(repr(sys.stdin.read()))"

    result = runner.run(make_request(["python3", "-c", read], wall_seconds=10))

    assert not result.timed_out
    assert result.ok
    assert result.output_excerpt == "''\n"


def test_a_command_finds_no_database_url_token_or_data_directory(
    runner, make_request, monkeypatch, tmp_path
):
    data = tmp_path / "data"
    (data / "secrets.env").write_text("SECRET_KEY=do-not-leak\n")
    monkeypatch.setenv("DATABASE_URL", "postgres://ephyra:hunter2@db/ephyra")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_notforthecommand")
    monkeypatch.setenv("EPHYRA_DATA_DIR", str(data))
    script = (
        'echo "db=${DATABASE_URL:-none} token=${GITHUB_TOKEN:-none}"; '
        'cat "${EPHYRA_DATA_DIR:-/nowhere}/secrets.env" || echo "no secrets"; echo ---; env'
    )

    result = runner.run(make_request(["sh", "-c", script], env={"GREETING": "hello"}))

    assert result.output_excerpt.startswith("db=none token=none\n")
    assert "no secrets" in result.output_excerpt
    for leaked in ("hunter2", "ghp_notforthecommand", "do-not-leak", "EPHYRA_DATA_DIR"):
        assert leaked not in result.output_excerpt
    assert "GREETING=hello" in result.output_excerpt
    env = result.output_excerpt.split("---\n", 1)[1]
    names = {line.split("=", 1)[0] for line in env.splitlines()}
    # The request's variables and the runner's documented defaults; sh adds PWD itself.
    assert names - {"PWD"} <= {"GREETING", "PATH", "HOME", "TMPDIR"}


def test_the_limits_reach_every_process_of_the_command(runner, make_request):
    result = runner.run(
        make_request(
            ["cat", "/proc/self/limits"],
            cpu_seconds=30,
            address_space_bytes=2 * 1024**3,
            file_size_bytes=64 * 1024**2,
            open_files=256,
            processes=300,
        )
    )

    limits = {
        line[:26].strip(): line[26:].split()[:2] for line in result.output_excerpt.splitlines()
    }
    assert limits["Max cpu time"] == ["30", "31"]
    assert limits["Max address space"] == [str(2 * 1024**3)] * 2
    assert limits["Max file size"] == [str(64 * 1024**2)] * 2
    assert limits["Max open files"] == ["256", "256"]
    assert limits["Max processes"] == ["300", "300"]
    assert limits["Max core file size"] == ["0", "0"]
