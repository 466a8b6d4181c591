"""The demo end to end, as README.md tells a newcomer: `make run` (scripts/run.sh: the web server
and one worker) in one terminal, `manage.py demo --approve-as demo` in another.

Everything is real and separate: the server and the worker are processes of their own on a
fresh data directory (and, when the test run has PostgreSQL, a fresh database on its server);
the demo is a third process, its production a fourth, exporting through the OpenTelemetry SDK
to the server over HTTP. The quest is then read as a person reads it: on its page, signed in.
"""

from __future__ import annotations

import html
import http.cookiejar
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "a-long-local-password"
CULPRIT_SUBJECT = "Apply the bulk discount per unit"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Ephyra:
    env: dict[str, str]
    base: str
    data: Path

    def manage(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


def environment(tmp_path: Path) -> tuple[dict[str, str], str | None]:
    """A newcomer's environment on a fresh data directory; on PostgreSQL (when the test run has
    it) a fresh database of this test's own: the name to drop afterwards."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "EPHYRA_"))
    }
    env |= {
        "EPHYRA_DATA_DIR": str(tmp_path / "data"),
        "EPHYRA_POLL_MS": "100",
        "DEBUG": "true",
        "BIN": str(Path(sys.executable).parent),
        "DJANGO_SETTINGS_MODULE": "ephyra.settings",
        "PYTHONWARNINGS": "ignore::DeprecationWarning",
    }
    database_url = os.environ.get("DATABASE_URL", "")
    if not database_url.startswith("postgres"):
        env.pop("REDIS_URL", None)  # the embedded default: SQLite and the folder broker
        return env, None
    server = urlsplit(database_url)
    fresh = f"ephyra_demo_{uuid.uuid4().hex[:12]}"
    subprocess.run(
        ["createdb", "-h", server.hostname, "-p", str(server.port or 5432), "-U",
         server.username or "postgres", fresh],
        check=True,
        capture_output=True,
    )
    env["DATABASE_URL"] = server._replace(path=f"/{fresh}", query="").geturl()
    return env, fresh


@pytest.fixture
def ephyra(tmp_path):
    """`make run` on a free port: migrated, serving, its worker running."""
    env, database = environment(tmp_path)
    port = free_port()
    env["EPHYRA_ADDR"] = f"127.0.0.1:{port}"
    log = tmp_path / "run.log"
    with log.open("w") as out:
        run = subprocess.Popen(
            ["sh", "scripts/run.sh"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while not answers(f"{base}/healthz"):
            assert run.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"the server did not come up:\n{log.read_text()}"
            time.sleep(0.3)
        yield Ephyra(env=env, base=base, data=tmp_path / "data")
    finally:
        os.killpg(run.pid, signal.SIGINT)
        try:
            run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        if database:
            server = urlsplit(os.environ["DATABASE_URL"])
            subprocess.run(
                ["dropdb", "-h", server.hostname, "-p", str(server.port or 5432), "-U",
                 server.username or "postgres", "--if-exists", "--force", database],
                capture_output=True,
                check=False,
            )


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as answer:
            return answer.status == 200
    except OSError:
        return False


def signed_in(ephyra: Ephyra) -> urllib.request.OpenerDirector:
    """A browser signed in as a superuser made the way README.md makes one."""
    made = subprocess.run(
        [sys.executable, "manage.py", "createsuperuser", "--noinput", "--username", "ann",
         "--email", "ann@example.com"],
        cwd=ROOT,
        env=ephyra.env | {"DJANGO_SUPERUSER_PASSWORD": PASSWORD},
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    browser = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )
    with browser.open(f"{ephyra.base}/login/", timeout=10) as r:
        form = r.read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    fields = {"csrfmiddlewaretoken": csrf, "username": "ann", "password": PASSWORD}
    login = urllib.request.Request(
        f"{ephyra.base}/login/",
        data=urllib.parse.urlencode(fields).encode(),
        headers={"Referer": f"{ephyra.base}/login/"},
    )
    with browser.open(login, timeout=10) as r:
        assert "/login/" not in r.url, r.url
    return browser


def run_demo(
    ephyra: Ephyra,
    *args: str,
    person: urllib.request.OpenerDirector | None = None,
    timeout: float = 300,
) -> tuple[str, str]:
    """Run the demo to its end; what it printed and the quest page it named last. With a
    signed-in ``person``, each checkpoint the demo says waits is approved on the quest's page.
    A demo that outlives ``timeout`` is stopped as `kill` stops it (its production with it)."""
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--url", ephyra.base, *args],
        cwd=ROOT,
        env=ephyra.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=read_lines, args=(demo.stdout, lines), daemon=True).start()
    said, deadline = [], time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
        except queue.Empty:
            line = ""
        if line is None:  # the demo closed its output: it ended
            break
        said.append(line)
        waiting = re.search(r"checkpoint ([ABC]): waiting for a reviewer to approve at (\S+)", line)
        if waiting and person is not None:
            approve_on_the_page(person, waiting.group(2), waiting.group(1))
        if time.monotonic() > deadline:
            demo.terminate()
            demo.wait(timeout=60)
            demo.stdout.close()
            pytest.fail("the demo did not end within {} s:\n{}".format(timeout, "".join(said)))
    demo.wait(timeout=60)
    demo.stdout.close()
    said = "".join(said)
    assert demo.returncode == 0, said
    assert "Traceback" not in said, said
    url = re.findall(r"done: (http://\S+)", said)
    assert url, said
    return said, url[-1]


def read_lines(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def approve_on_the_page(person: urllib.request.OpenerDirector, url: str, checkpoint: str) -> None:
    """What a reviewer does: open the quest's page, press Approve in the checkpoint's form, and
    press it again on the fresh page if the quest moved meanwhile (a repeated signal)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        page = person.open(url, timeout=10).read().decode()
        form = re.search(r'<form class="decide"[^>]*action="([^"]+)".*?</form>', page, re.S)
        assert form is not None, page
        fields = dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', form.group(0)))
        assert fields["checkpoint"] == checkpoint, page
        fields |= {"verdict": "approve", "text": ""}
        press = urllib.request.Request(
            urllib.parse.urljoin(url, html.unescape(form.group(1))),
            data=urllib.parse.urlencode(fields).encode(),
            headers={"HX-Request": "true", "Referer": url},
        )
        with person.open(press, timeout=10) as answer:
            if answer.headers["X-Ephyra-Outcome"] in {"applied", "queued"}:
                return
        time.sleep(0.5)
    pytest.fail(f"checkpoint {checkpoint} could not be approved on {url}")


def remote_log(ephyra: Ephyra, slug: str) -> list[str]:
    """The subjects on the demo remote's main, newest first: what everyone pulls."""
    remote = ephyra.data / "demo" / slug / "remote.git"
    return subprocess.run(
        ["git", "--git-dir", str(remote), "log", "--format=%s", "main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()


def test_the_demo_takes_a_real_regression_from_signal_to_closed(ephyra):
    said, url = run_demo(ephyra, "--approve-as", "demo")

    steps = [
        "signal: production answered 500",
        "a hypothesis is written (checkpoint A)",
        "checkpoint A: approved as demo",
        "plan: revert",
        "checkpoint B: approved as demo",
        "run_proof succeeded",
        "checkpoint C: approved as demo",
        "landed; production is watched",
        "deployed: production restarted at",
        "closed: production stayed clean through the watch",
    ]
    positions = [said.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), said
    assert CULPRIT_SUBJECT in said  # the plan names the culprit bisect found

    # The fix is on the remote's main, the commit above the culprit's revert.
    assert remote_log(ephyra, "demo")[0] == f'Revert "{CULPRIT_SUBJECT}"'
    # And on the quest page, as a reviewer sees it: closed, approved by demo.
    page = signed_in(ephyra).open(url, timeout=10).read().decode()
    assert '<span class="badge closed">closed</span>' in page, page
    assert "watching → closed" in page  # the timeline
    assert approvals(page, "demo") == 3, page  # A, B and C, each by demo


def approvals(page: str, actor: str) -> int:
    """The checkpoint decisions ``actor`` made at revision 1 that the quest took, read from
    the quest page's timeline. A decision sent while the quest moved on (a signal's sighting
    moves its journal head) is refused as stale and sent again on the fresh head: that is the
    stale guard at work, and the only refusal allowed here."""
    taken = 0
    for entry in page.split("<li>")[1:]:
        if "checkpoint_decided" not in entry or f"UTC · {actor} · revision 1" not in entry:
            continue
        if "badge refused" in entry:
            assert "the quest moved on since it was shown" in entry, entry
        else:
            taken += "badge accepted" in entry
    return taken


def test_the_rollback_demo_rolls_the_fix_back_and_researches_again_at_revision_2(ephyra):
    # Without --approve-as: a person approves each checkpoint in the browser.
    person = signed_in(ephyra)
    said, url = run_demo(ephyra, "--scenario", "rollback", person=person)
    for checkpoint in "ABC":
        assert f"checkpoint {checkpoint}: waiting for a reviewer to approve at {url}" in said

    assert "deployed: production restarted at" in said
    assert "a regression was seen: rolling the landed commit back" in said
    assert "new error fingerprints in the patched files" in said
    assert "rolled back: the quest is" in said and "at revision 2" in said
    # The remote's main: the fix, then its revert, on top of the history.
    subjects = remote_log(ephyra, "demo")
    assert subjects[:2] == [
        f'Revert "Revert "{CULPRIT_SUBJECT}""',
        f'Revert "{CULPRIT_SUBJECT}"',
    ], subjects
    page = person.open(url, timeout=10).read().decode()
    assert "<dt>Revision</dt><dd>2</dd>" in page, page
    assert "watching → rolled_back" in page and "rolled_back → researching" in page, page
    assert approvals(page, "ann") == 3, page  # A, B and C, each by ann


def test_the_demo_without_a_server_says_how_to_start_one_and_creates_nothing(tmp_path):
    env, database = environment(tmp_path)
    ephyra = Ephyra(env=env, base="", data=tmp_path / "data")
    try:
        assert ephyra.manage("migrate", "--no-input").returncode == 0
        nowhere = f"http://127.0.0.1:{free_port()}"
        done = ephyra.manage("demo", "--url", nowhere)
        assert done.returncode == 1
        assert done.stderr.strip() == (
            f"CommandError: Ephyra does not answer at {nowhere}: start it with `make run` in "
            "another terminal (or name its address with --url)"
        )
        assert ephyra.manage("workspace", "list").stdout == ""
        assert not (tmp_path / "data" / "demo").exists()
    finally:
        if database:
            server = urlsplit(os.environ["DATABASE_URL"])
            subprocess.run(
                ["dropdb", "-h", server.hostname, "-p", str(server.port or 5432), "-U",
                 server.username or "postgres", "--if-exists", database],
                capture_output=True,
                check=False,
            )
