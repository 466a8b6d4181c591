"""What only a terminal sees: colour when one is attached (never in a pipe, never with
NO_COLOR), and ``watch`` following a quest until it reaches a checkpoint."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
import warnings

import pytest

from tests.cli.conftest import SCRIPT, advance
from tests.core.story import Story
from tests.quests.conftest import drive

pytestmark = pytest.mark.django_db(transaction=True)
ESC = "\x1b["


def on_a_terminal(args: list[str], env: dict[str, str], timeout: float = 30) -> tuple[int, str]:
    """Run ``ephyra`` with a pseudo-terminal as its stdout and stderr; its exit code and all
    it wrote."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [str(SCRIPT), *args], stdout=follower, stderr=follower, stdin=subprocess.DEVNULL, env=env
    )
    os.close(follower)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.1)
        if ready:
            try:
                data = os.read(leader, 4096)
            except OSError:  # the terminal closed: the program ended
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    os.close(leader)
    return process.wait(timeout=timeout), b"".join(chunks).decode()


def test_tables_are_coloured_on_a_terminal_only_and_never_with_no_color(
    ephyra, server, shop, cli_env
):
    drive(shop, "checkout-500", "hypothesised")
    env = {**cli_env, **server.as_("rita")}
    code, shown = on_a_terminal(["quests"], env)
    assert code == 0, shown
    assert f"{ESC}1mQUEST" in shown  # the header in bold
    assert f"{ESC}33mhypothesised" in shown  # a state waiting for a person in yellow

    code, plain = on_a_terminal(["quests"], {**env, "NO_COLOR": "1"})
    assert code == 0
    assert ESC not in plain and "hypothesised" in plain
    code, flagged = on_a_terminal(["quests", "--no-color"], env)
    assert ESC not in flagged and "hypothesised" in flagged

    piped = ephyra("quests", env=server.as_("rita"))
    assert ESC not in piped.out and "hypothesised" in piped.out


def test_an_error_is_red_on_a_terminal(cli_env, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nproof:\n  attempts: 0\n")
    code, shown = on_a_terminal(["policy", "check", str(bad)], cli_env)
    assert code == 2
    assert f"{ESC}31merror:{ESC}0m {bad}: invalid policy" in shown


def test_watch_follows_a_quest_until_it_reaches_a_checkpoint(server, shop, cli_env):
    story = Story("checkout-500")
    advance(shop, story, "triaged")
    env = {**cli_env, **server.as_("rita")}
    watching = subprocess.Popen(
        [str(SCRIPT), "watch", "checkout-500", "--interval", "0.2", "--timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    time.sleep(1.0)
    assert watching.poll() is None  # still watching: the quest waits for nobody yet
    advance(shop, story, "hypothesised")
    out, err = watching.communicate(timeout=30)
    assert watching.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("shop/checkout-500  triaged  revision 1")
    assert lines[-1].startswith("shop/checkout-500  hypothesised  revision 1")
    assert err == "shop/checkout-500: at checkpoint A\n"


def test_watch_gives_up_after_its_timeout_with_exit_one(ephyra, server, shop):
    drive(shop, "checkout-500", "researching")
    ran = ephyra(
        "watch", "checkout-500", "--interval", "0.2", "--timeout", "1", env=server.as_("rita")
    )
    assert ran.code == 1
    assert ran.err.startswith("shop/checkout-500: still researching after ")


def test_watch_on_a_terminal_rewrites_one_progress_line(server, shop, cli_env):
    drive(shop, "checkout-500", "hypothesised")
    code, shown = on_a_terminal(["watch", "checkout-500"], {**cli_env, **server.as_("rita")})
    assert code == 0, shown
    assert shown.startswith(f"\r{ESC}2Kshop/checkout-500  {ESC}33mhypothesised{ESC}0m")
    assert "at checkpoint A" in shown


def read_until(fd: int, marker: bytes, timeout: float = 30) -> bytes:
    seen, deadline = b"", time.monotonic() + timeout
    while marker not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


def test_login_asks_for_the_url_and_the_token_without_echoing_the_token(server, cli_env):
    token = server.as_("rita")["EPHYRA_TOKEN"]
    with warnings.catch_warnings():
        # Python 3.12 warns of fork() beside threads (the live server's); the child runs no
        # Python of ours: it replaces itself with ephyra at once.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid, terminal = pty.fork()  # the child's controlling terminal, where getpass asks
    if pid == 0:  # pragma: no cover - the child becomes ephyra at once
        os.execve(str(SCRIPT), [str(SCRIPT), "login"], cli_env)
    try:
        assert b"Server URL: " in read_until(terminal, b"Server URL: ")
        os.write(terminal, f"{server.url}\n".encode())
        assert b"API token: " in read_until(terminal, b"API token: ")
        os.write(terminal, f"{token}\n".encode())
        after = read_until(terminal, b"saved to")
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(terminal)
    assert os.waitstatus_to_exitcode(status) == 0
    assert f"Logged in to {server.url} as rita".encode() in after
    assert token.encode() not in after  # typed, never shown
