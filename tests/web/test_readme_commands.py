"""Every command README.md shows in a ```sh block runs, as written, in a fresh clone.

The repository as it stands (HEAD and the working tree's changes, so this checks what is being
written) is cloned into tmp_path, on a branch named ``main`` as a clone of the project has it,
with no ``.ephyra``: a fresh data directory. Each block runs in a shell of its own from the
clone's root, as README.md says, with the environment of a newcomer (no DATABASE_URL, REDIS_URL,
SECRET_KEY, DEBUG or EPHYRA_ variable), its lines one after another, ``export`` lines carried to
the lines after them. Each line must exit 0 without a traceback, or, where it ends with
``; echo "exit $?"   # N: ...``, print ``exit N``.

What is not run as such, and why:
- The install step of ``make``: the clone's ``.venv`` borrows the packages this test runs with
  (installing from PyPI needs the network, and the same ``pyproject.toml`` made those).
- ``make test``: it runs this test. CI runs it, on both databases.
- Commands that serve until stopped (``make run``, the workers): each is started, seen serving
  (an HTTP answer, its ready line), stopped with Ctrl-C's signal, and must stop cleanly.
- ``make run`` serves on a free port through ``EPHYRA_ADDR`` (documented), not on 8000, which
  another program on the machine may hold.
- The PostgreSQL and Redis blocks run only where the test run has both (as CI gives them); the
  database the README names is replaced by a fresh one on the test run's server, and the Redis
  URL by the test run's, so the test touches no database of anyone's.
"""

from __future__ import annotations

import os
import pty
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

# The README's lines that are not run here, and why.
NOT_RUN = {
    "make test": "it runs this test",
    "DATABASE_URL=postgres://postgres@127.0.0.1:5432/ephyra REDIS_URL=redis://127.0.0.1:6379/0 "
    "make test": "it runs this test (CI runs it on PostgreSQL and Redis)",
}
# Commands that serve until stopped: what shows they serve.
SERVING = {
    "make run": "http",
    ".venv/bin/python manage.py worker": "celery@",
    ".venv/bin/celery -A ephyra worker --pool=solo -Q ephyra": "celery@",
    ".venv/bin/python manage.py worker --standalone": "(standalone)",
}
# Commands run while `make run` serves beside them (README.md: "in another terminal"), with
# EPHYRA_ADDR naming where it serves, and what each must print.
BESIDE_MAKE_RUN = {
    ".venv/bin/python manage.py demo --approve-as demo": "closed: production stayed clean",
}
# A newcomer's environment has none of the test run's settings (nor their *_FILE forms).
SETTINGS = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE", "EPHYRA_")


@dataclass
class Line:
    readme: str  # the command as written, without its trailing comment: how it is known
    text: str  # what runs: the line as written, but for the PostgreSQL block's replacements
    expected_exit: int = 0
    echoes_exit: bool = False


@dataclass
class Block:
    lines: list[Line] = field(default_factory=list)

    @property
    def needs_postgres(self) -> bool:
        return any("postgres://" in line.text for line in self.lines)


def readme_blocks() -> list[Block]:
    blocks = []
    for body in re.findall(r"^```sh\n(.*?)^```", README.read_text(), re.S | re.M):
        block = Block()
        for text in body.replace("\\\n", "").splitlines():
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            command, comment = split_comment(text)
            line = Line(readme=command, text=text)
            if command.endswith('; echo "exit $?"'):
                line.echoes_exit = True
                line.expected_exit = int(re.match(r"\s*(\d+)\b", comment).group(1))
            block.lines.append(line)
        blocks.append(block)
    return blocks


def split_comment(text: str) -> tuple[str, str]:
    """The command and its trailing comment, as the shell splits them."""
    position = 0
    while True:
        hash_at = text.find(" #", position)
        if hash_at < 0:
            return text.rstrip(), ""
        try:  # a " #" inside quotes is not a comment: the part before it must close its quotes
            shlex.split(text[:hash_at])
        except ValueError:
            position = hash_at + 2
            continue
        return text[:hash_at].rstrip(), text[hash_at + 2 :].strip()


# --- a fresh clone ----------------------------------------------------------------------------


def fresh_clone(tmp_path: Path) -> Path:
    clone = tmp_path / "ephyra"
    git = ["git", "-c", "advice.detachedHead=false"]
    subprocess.run([*git, "clone", "-q", str(ROOT), str(clone)], check=True)
    changes = subprocess.run(
        ["git", "-C", str(ROOT), "diff", "HEAD", "--binary"], capture_output=True, check=True
    ).stdout
    if changes:
        subprocess.run(["git", "-C", str(clone), "apply", "--binary"], input=changes, check=True)
    untracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--others", "--exclude-standard", "-z"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, untracked):
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, clone / name)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "-B", "main"], check=True)
    borrow_packages(clone)
    return clone


def borrow_packages(clone: Path) -> None:
    """``.venv`` as ``make`` leaves it, with this test run's packages in place of a download:
    a virtual environment whose path reads the clone's code first, then our site-packages, the
    console scripts the README calls, and the stamp that tells ``make`` it is installed."""
    venv = clone / ".venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True
    )
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = venv / "lib" / version / "site-packages"
    (site / "_borrowed.pth").write_text(f"{clone}\n{sysconfig.get_paths()['purelib']}\n")
    ours = Path(sys.executable).parent
    for script in ("ephyra-replay", "celery"):
        body = (ours / script).read_text().split("\n", 1)[1]
        (venv / "bin" / script).write_text(f"#!{venv}/bin/python\n{body}")
        (venv / "bin" / script).chmod(0o755)
    stamp = venv / ".installed"
    stamp.touch()
    later = (clone / "pyproject.toml").stat().st_mtime + 10
    os.utime(stamp, (later, later))


def newcomer_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(SETTINGS)}


# --- running the lines ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_block(block: Block, clone: Path, env: dict[str, str], ran: list[tuple[str, str]]) -> None:
    """Run the block's lines in order; add each line run, with what it printed, to ``ran``."""
    env = dict(env)
    for line in block.lines:
        if line.readme in NOT_RUN:
            continue
        if line.readme.startswith("export "):
            env, said = exported(line.text, clone, env), ""
        elif line.readme in SERVING:
            said = serve(line.readme, line.text, clone, env)
        elif line.readme in BESIDE_MAKE_RUN:
            said = serve("make run", "make run", clone, env, beside=line)
        elif "createsuperuser" in line.readme:
            said = answer_prompts(line.text, clone, env)
        else:
            said = run_line(line, clone, env)
        ran.append((line.text, said))


def exported(command: str, clone: Path, env: dict[str, str]) -> dict[str, str]:
    done = subprocess.run(
        ["bash", "-c", f"set -e\n{command}\nenv -0"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    return dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)


def run_line(line: Line, clone: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-c", line.text],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    said = f"$ {line.text}\n{done.stdout}{done.stderr}"
    assert "Traceback" not in said, said
    assert done.returncode == 0, said
    if line.echoes_exit:
        assert done.stdout.splitlines()[-1] == f"exit {line.expected_exit}", said
    return said


def serve(
    readme: str, command: str, clone: Path, env: dict[str, str], beside: Line | None = None
) -> str:
    """Start a command that serves until stopped, see it serve, (run ``beside`` while it
    serves,) stop it as Ctrl-C does."""
    port = free_port()
    env = env | {"EPHYRA_ADDR": f"127.0.0.1:{port}"} if readme == "make run" else env
    log = clone.parent / f"serving-{uuid.uuid4().hex[:8]}.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=clone,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while not serving(SERVING[readme], port, log):
            assert process.poll() is None, f"$ {command} ended:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"$ {command} did not serve:\n{log.read_text()}"
            time.sleep(0.2)
        besides = run_beside(beside, clone, env) if beside is not None else ""
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    said = log.read_text()
    assert "Traceback" not in said, said
    return said + besides


def run_beside(line: Line, clone: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-c", line.text],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )
    said = f"$ {line.text}\n{done.stdout}{done.stderr}"
    assert "Traceback" not in said, said
    assert done.returncode == 0, said
    assert BESIDE_MAKE_RUN[line.readme] in said, said
    return said


def serving(marker: str, port: int, log: Path) -> bool:
    if marker != "http":
        return marker in log.read_text()
    try:
        for page in ("/healthz", "/admin/login/", "/static/admin/css/base.css"):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{page}", timeout=5) as answer:
                assert answer.status == 200, page
    except OSError:
        return False
    return True


def answer_prompts(command: str, clone: Path, env: dict[str, str]) -> str:
    """Run an interactive command on a terminal of its own and answer it as a person would."""
    answers = [
        ("Username", "ann"),
        ("Email address", "ann@example.com"),
        ("Password:", "a-long-local-password"),
        ("Password (again)", "a-long-local-password"),
    ]
    pid, terminal = pty.fork()
    if pid == 0:  # the child: the shell, on the new terminal
        os.chdir(clone)
        os.execve("/bin/bash", ["bash", "-c", command], env)
    said, deadline = "", time.monotonic() + 60
    try:
        while True:
            ready, _, _ = select.select([terminal], [], [], 1)
            if ready:
                try:
                    chunk = os.read(terminal, 4096).decode(errors="replace")
                except OSError:  # the terminal closed: the command is done
                    break
                if not chunk:
                    break
                said += chunk
                if answers and answers[0][0] in said.rsplit("\n", 1)[-1]:
                    os.write(terminal, (answers.pop(0)[1] + "\n").encode())
            assert time.monotonic() < deadline, f"$ {command}\n{said}"
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(terminal)
    assert answers == [], f"$ {command} did not ask:\n{said}"
    assert os.waitstatus_to_exitcode(status) == 0, f"$ {command}\n{said}"
    assert "Superuser created successfully." in said, said
    return said


# --- the tests --------------------------------------------------------------------------------


def test_the_readme_shows_no_line_this_test_cannot_account_for():
    lines = [line.readme for block in readme_blocks() for line in block.lines]
    for command in [*NOT_RUN, *SERVING, *BESIDE_MAKE_RUN]:
        assert command in lines, f"README.md no longer shows {command!r}: update this test"
    assert any("createsuperuser" in line for line in lines)


def test_every_readme_command_runs_as_written_on_the_embedded_default(tmp_path):
    clone = fresh_clone(tmp_path)
    blocks = [block for block in readme_blocks() if not block.needs_postgres]
    ran: list[tuple[str, str]] = []
    for block in blocks:
        run_block(block, clone, newcomer_environment(), ran)
    expected = [line.text for block in blocks for line in block.lines if line.readme not in NOT_RUN]
    assert [text for text, _ in ran] == expected
    # What the walk-through left: a journal in the mirror, a key made once, kept private and
    # never shown.
    assert (clone / ".ephyra" / "mirrors" / "shop.git").is_dir()
    key_file = clone / ".ephyra" / "secret_key"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    key = key_file.read_text().strip()
    assert [text for text, said in ran if key in said] == []


def test_every_readme_command_for_postgresql_and_redis_runs_as_written(tmp_path):
    database_url, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL")
    if not database_url.startswith("postgres") or not redis_url:
        pytest.skip("needs PostgreSQL and Redis: run with DATABASE_URL and REDIS_URL, as CI does")
    server = urlsplit(database_url)
    host, port, user = server.hostname, server.port or 5432, server.username or "postgres"
    fresh = f"ephyra_readme_{uuid.uuid4().hex[:12]}"
    # README's literal → this run's server, with a database of the test's own.
    createdb = f"createdb -h {host} -p {port} -U {user} {fresh}"
    url = server._replace(path=f"/{fresh}", query="").geturl()
    replaced = {
        "createdb -h 127.0.0.1 -U postgres ephyra": createdb,
        "postgres://postgres@127.0.0.1:5432/ephyra": url,
        "redis://127.0.0.1:6379/0": redis_url,
    }
    blocks = [block for block in readme_blocks() if block.needs_postgres]
    text = "\n".join(line.text for block in blocks for line in block.lines)
    for literal in replaced:
        assert literal in text, f"README.md no longer shows {literal!r}: update this test"
    for block in blocks:
        for line in block.lines:
            for literal, here in replaced.items():
                line.text = line.text.replace(literal, here)
    clone = fresh_clone(tmp_path)
    ran: list[tuple[str, str]] = []
    try:
        for block in blocks:
            run_block(block, clone, newcomer_environment(), ran)
    finally:
        subprocess.run(
            ["dropdb", "-h", host, "-p", str(port), "-U", user, "--if-exists", fresh],
            capture_output=True,
            check=False,
        )
    expected = [line.text for block in blocks for line in block.lines if line.readme not in NOT_RUN]
    assert [text for text, _ in ran] == expected
    assert ran[0][0] == createdb
