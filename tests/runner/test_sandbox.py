"""The sandbox: no network, nothing of the host but a read-only system and the worktree, and a
clear refusal where bubblewrap cannot run."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from ephyra.core.ports import RunnerUnavailable
from ephyra.runner import SandboxRunner
from tests.runner.conftest import needs_python, needs_sandbox, processes_with

pytestmark = needs_sandbox


@needs_python
def test_a_connection_to_the_hosts_loopback_fails(make_request):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"

        sandboxed = SandboxRunner().run(make_request(["python3", "-c", connect]))

    assert not sandboxed.ok
    assert "ConnectionRefusedError" in sandboxed.output_excerpt


@needs_python
def test_the_same_connection_succeeds_outside_the_sandbox(make_request):
    # The control for the test above: the listener is reachable when not sandboxed.
    from ephyra.runner import LocalRunner

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"

        local = LocalRunner().run(make_request(["python3", "-c", connect]))

    assert local.ok


def test_a_write_inside_the_worktree_succeeds(make_request, worktree):
    result = SandboxRunner().run(make_request(["sh", "-c", "echo patched > fixed.txt"]))

    assert result.ok
    assert (worktree / "fixed.txt").read_text() == "patched\n"


@pytest.mark.parametrize("target", ["/usr/evil", "/etc/evil", "/evil", "/bin/evil"])
def test_a_write_to_the_system_fails(make_request, target):
    result = SandboxRunner().run(make_request(["sh", "-c", f"echo x > {target}"]))

    assert not result.ok
    assert "Read-only file system" in result.output_excerpt
    assert not Path(target).exists()


def test_a_write_beside_the_worktree_never_reaches_the_host(make_request, tmp_path):
    # Here the worktree is under /tmp, which the sandbox replaces with its own: the write lands
    # there and goes with it. (Under a data directory outside /tmp it fails outright.)
    beside = tmp_path / "data" / "stolen.txt"

    SandboxRunner().run(make_request(["sh", "-c", f"echo x > {beside}"]))

    assert not beside.exists()


def test_root_home_and_the_data_directory_are_not_visible(make_request, tmp_path):
    data = tmp_path / "data"
    (data / "secrets.env").write_text("SECRET_KEY=do-not-leak\n")
    (data / "mirrors").mkdir()
    script = (
        f"ls -A /root /home; cat {data}/secrets.env; echo ---; "
        f"echo $(ls -A {data}); echo $(ls -A {data}/worktrees); echo $(ls -A /)"
    )

    result = SandboxRunner().run(make_request(["sh", "-c", script]))

    seen, _, listed = result.output_excerpt.partition("---\n")
    assert "ls: cannot access '/root': No such file or directory" in seen
    assert "ls: cannot access '/home': No such file or directory" in seen
    assert "secrets.env: No such file or directory" in seen
    assert "do-not-leak" not in result.output_excerpt
    data_dir, worktrees, root = listed.splitlines()
    assert (data_dir, worktrees) == ("worktrees", "q-1")  # only the way to the worktree
    assert set(root.split()) <= {
        "bin",
        "dev",
        "etc",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "sbin",
        "tmp",
        "usr",
    }


def test_the_sandbox_holds_no_capabilities_and_sees_only_its_own_processes(make_request):
    result = SandboxRunner().run(
        make_request(["sh", "-c", "grep CapEff /proc/self/status; ls /proc"])
    )

    lines = result.output_excerpt.split()
    assert lines[:2] == ["CapEff:", "0000000000000000"]
    pids = [word for word in lines[2:] if word.isdigit()]
    assert len(pids) <= 4  # bubblewrap's init, the shell, ls; not the host's processes


def test_tmp_is_private_to_each_run(make_request):
    SandboxRunner().run(make_request(["sh", "-c", "echo left > /tmp/left-behind"]))

    second = SandboxRunner().run(make_request(["sh", "-c", "ls -A /tmp"], name="second"))

    assert "left-behind" not in second.output_excerpt
    assert not Path("/tmp/left-behind").exists()


@needs_python
def test_python_runs_and_a_virtual_environment_made_inside_works_inside(make_request, worktree):
    runner = SandboxRunner()
    setup = runner.run(make_request(["python3", "-m", "venv", "--without-pip", ".venv"]))
    test = runner.run(
        make_request(
            [".venv/bin/python", "-c", "import sys; print(sys.prefix)"],
            name="test",
        )
    )

    assert setup.ok, setup.output_excerpt
    assert test.ok, test.output_excerpt
    assert test.output_excerpt == f"{worktree}/.venv\n"


def test_the_environment_never_appears_on_a_command_line_the_host_can_read(make_request):
    secret = "sk-visible-to-ps-would-be-bad"
    seen = []

    def should_stop() -> bool:
        seen.append(processes_with(secret))
        return len(seen) >= 3

    result = SandboxRunner().run(
        make_request(["sleep", "30"], env={"AGENT_API_KEY": secret}), should_stop=should_stop
    )

    assert result.stopped
    assert seen == [[], [], []]


def test_the_sandbox_refuses_to_run_without_bubblewrap_and_says_what_to_install(
    make_request, tmp_path, artifacts
):
    runner = SandboxRunner(bwrap=str(tmp_path / "bin" / "bwrap"))

    with pytest.raises(RunnerUnavailable, match=r"no '.*/bin/bwrap' found; install bubblewrap"):
        runner.run(make_request(["touch", "ran"]))
    assert not artifacts.exists()


def test_the_sandbox_refuses_where_bubblewrap_cannot_create_namespaces(
    make_request, tmp_path, worktree
):
    # A bwrap that fails as bubblewrap does on a host without unprivileged user namespaces.
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    runner = SandboxRunner(bwrap=str(fake))

    with pytest.raises(RunnerUnavailable) as refused:
        runner.run(make_request(["touch", "ran"]))

    message = str(refused.value)
    assert "No permissions to create new namespace" in message
    assert "unprivileged user namespaces" in message
    assert not (worktree / "ran").exists()
    assert os.listdir(worktree) == []
