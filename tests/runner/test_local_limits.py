"""The per-process limits, enforced: CPU time, file size, open files, processes; and the
requests a runner cannot honour."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ephyra.runner import LocalRunner
from tests.runner.conftest import needs_python

BUSY = "while True: pass"


@needs_python
def test_a_command_past_its_cpu_time_is_killed_by_sigxcpu(make_request):
    result = LocalRunner().run(make_request(["python3", "-c", BUSY], cpu_seconds=1))

    assert result.signal == "SIGXCPU"
    assert result.exit_code is None
    assert not result.timed_out
    assert "CPU time limit" in result.describe()


@needs_python
def test_a_command_writing_a_file_past_the_size_limit_fails(make_request, worktree):
    write = "open('big', 'wb').write(b'x' * 3 * 1024 * 1024)"

    result = LocalRunner().run(make_request(["python3", "-c", write], file_size_bytes=1024 * 1024))

    assert not result.ok
    assert "File too large" in result.output_excerpt
    assert (worktree / "big").stat().st_size == 1024 * 1024


def test_the_output_capture_is_not_bound_by_the_file_size_limit(make_request):
    # The runner writes the output file itself; the limit is the command's, for its files.
    result = LocalRunner().run(
        make_request(["head", "-c", "300000", "/dev/zero"], file_size_bytes=100_000)
    )

    assert result.ok
    assert result.output_size == 300_000


@needs_python
def test_a_command_opening_more_files_than_allowed_fails(make_request):
    opening = "files = [open('/dev/null') for _ in range(100)]; print('opened')"

    result = LocalRunner().run(make_request(["python3", "-c", opening], open_files=32))

    assert not result.ok
    assert "Too many open files" in result.output_excerpt


@pytest.mark.skipif(
    os.geteuid() == 0, reason="the kernel does not apply RLIMIT_NPROC to root (docs/work.md)"
)
def test_a_command_starting_more_processes_than_allowed_fails(make_request):
    # RLIMIT_NPROC counts every process of the user, so the limit is what runs now plus a few.
    mine = sum(
        1
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _owner(entry) == os.getuid()
    )
    script = "for i in $(seq 200); do sleep 30 & done; wait"

    result = LocalRunner().run(
        make_request(["sh", "-c", script], processes=mine + 20, wall_seconds=60)
    )

    assert "fork" in result.output_excerpt.lower() or "resource" in result.output_excerpt.lower()


def _owner(path: Path) -> int | None:
    try:
        return path.stat().st_uid
    except OSError:
        return None


def test_a_command_that_does_not_exist_exits_127_and_says_so(runner, make_request):
    result = runner.run(make_request(["no-such-command-here", "--help"]))

    assert result.exit_code == 127
    assert "no-such-command-here: " in result.output_excerpt
    assert "not found" in result.output_excerpt


def test_a_file_that_cannot_be_executed_exits_126(runner, make_request, worktree):
    (worktree / "notes.txt").write_text("not a program\n")

    result = runner.run(make_request([str(worktree / "notes.txt")]))

    assert result.exit_code == 126
    assert "notes.txt: " in result.output_excerpt


def test_a_working_directory_that_does_not_exist_is_refused_and_nothing_is_written(
    runner, make_request, tmp_path, artifacts
):
    request = make_request(["true"])
    missing = request.__class__(
        argv=request.argv,
        cwd=str(tmp_path / "gone"),
        artifacts_dir=request.artifacts_dir,
        name=request.name,
    )

    with pytest.raises(ValueError, match=r"the working directory .*/gone does not exist"):
        runner.run(missing)
    assert not artifacts.exists()


def test_the_path_and_home_defaults_apply_only_when_the_request_has_none(make_request, worktree):
    given = LocalRunner().run(
        make_request(["sh", "-c", 'echo "$PATH|$HOME"'], env={"PATH": "/bin", "HOME": "/h"})
    )
    default = LocalRunner().run(make_request(["sh", "-c", 'echo "$PATH|$HOME|$TMPDIR"']))

    assert given.output_excerpt == "/bin|/h\n"
    path, home, tmpdir = default.output_excerpt.strip().split("|")
    assert path == "/usr/local/bin:/usr/bin:/bin"
    assert home == tmpdir
    assert not Path(home).exists()  # the run's private home went with it
