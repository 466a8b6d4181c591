"""The effectiveness benchmark's repositories: a project's source distribution fetched from the
package index (refused unless its SHA-256 is the pinned one), turned into a Git history with one
injected regression, pushed to a bare remote; and production hitting the regression with the
OpenTelemetry SDK exporting its traceback to Ephyra.

The history of a case, oldest first: the package and its suite as released; the rest of the
distribution's files added in a few commits; maintenance commits that each edit one function
(a comment where its body starts); the culprit in the middle of them; for a conflict case, a
later commit that edits the broken line again, so reverting the culprit cannot apply cleanly.
"""

from __future__ import annotations

import ast
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tarfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

from benchmarks.effectiveness_cases import PROJECTS, Project, Regression, file_of

START = 1_767_225_600  # 2026-01-01T00:00:00Z: each history's first commit
PEOPLE = ("Ada Lovelace <ada@example.org>", "Grace Hopper <grace@example.org>")
CULPRIT_AUTHOR = "Rita Regress <rita@example.org>"
TOUCHES_BEFORE, TOUCHES_AFTER = 6, 6  # maintenance commits around the culprit (about)
# Files a suite does not need, added after the first commit.
LATER = ("README", "LICENSE", "AUTHORS", "CHANGES", "MANIFEST.in", "Makefile", "docs/",
         "requirements/", "documentation/")


class PinMismatch(Exception):
    """A downloaded distribution is not the pinned one."""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(project: Project, cache: Path) -> Path:
    """The project's sdist from ``cache``, downloaded with pip when missing; its SHA-256 checked
    every time (a cached file that changed is refused too)."""
    folder = cache / f"{project.name}-{project.version}"
    found = sorted(folder.glob("*.tar.gz"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-binary", ":all:", "--dest", str(folder), project.requirement],
            capture_output=True, text=True, check=False,
        )
        found = sorted(folder.glob("*.tar.gz"))
        if done.returncode != 0 or not found:
            raise RuntimeError(f"pip download {project.requirement}: {done.stderr.strip()[-800:]}")
    archive = found[0]
    digest = sha256(archive)
    if digest != project.sha256:
        raise PinMismatch(
            f"{archive}: SHA-256 {digest}, pinned {project.sha256}; refusing it (delete the "
            "file to download it again)"
        )
    return archive


def unpack(archive: Path, where: Path) -> Path:
    """The sdist's files in ``where`` (its top folder stripped), without build metadata."""
    where.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts[1:]
            if not parts or not member.isfile():
                continue
            if parts[0] == "PKG-INFO" or any(p.endswith(".egg-info") for p in parts):
                continue
            member.name = str(Path(*parts))
            tar.extract(member, where, filter="data")
    return where


@dataclass(frozen=True)
class History:
    source: Path  # the developers' clone
    remote: Path  # the bare repository: the workspace's remote
    commits: tuple[str, ...]  # main, oldest first
    culprit: str

    @property
    def head(self) -> str:
        return self.commits[-1]


def build_history(regression: Regression, pristine: Path, where: Path) -> History:
    """Write the case's history in ``where/source`` and push it to ``where/remote.git``."""
    project = PROJECTS[regression.project]
    source, remote = where / "source", where / "remote.git"
    shutil.copytree(pristine, source)
    later = sorted(p for p in _files(source) if p.startswith(LATER))
    hidden = {p: (source / p).read_bytes() for p in later}
    for p in later:
        (source / p).unlink()
    git(source, "init", "--quiet", "--initial-branch=main")
    commits: list[str] = []
    commit = _committer(source, commits)
    commit(f"Import {project.name} {project.version}")
    for chunk in _chunks(later, 4):
        for p in chunk:
            (source / p).parent.mkdir(parents=True, exist_ok=True)
            (source / p).write_bytes(hidden[p])
        commit(f"Add {', '.join(chunk[:2])}{' and more' if len(chunk) > 2 else ''}")
    while len(commits) < 5:  # a short distribution: notes stand in for its missing files
        note = source / "notes" / f"maintainers-{len(commits)}.md"
        note.parent.mkdir(exist_ok=True)
        note.write_text(f"# Notes {len(commits)}\n\nWho reviews what in {project.name}.\n")
        commit(f"Keep the maintainers' notes ({len(commits)})")

    rng = random.Random(regression.name)
    target = source / file_of(regression)
    before = rng.randint(TOUCHES_BEFORE - 2, TOUCHES_BEFORE + 2)
    touched = 0
    for _ in range(before):
        touched += 1
        name = _touch(source, project, regression, rng, touched)
        commit(f"Review {name}")
    _replace_in_function(target, regression.function, regression.old, regression.new)
    commit(f"Simplify {regression.function}", author=CULPRIT_AUTHOR)
    culprit = commits[-1]
    for k in range(TOUCHES_AFTER):
        if regression.conflict and k == 2:
            _replace_in_function(
                target, regression.function, regression.new,
                f"{regression.new}  # kept short on purpose",
            )
            commit(f"Say why {regression.function} is short")
            continue
        touched += 1
        name = _touch(source, project, regression, rng, touched)
        commit(f"Review {name}")
    git(where, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    git(source, "push", "--quiet", str(remote), "main")
    return History(source=source, remote=remote, commits=tuple(commits), culprit=culprit)


def _files(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]


def _chunks(items: list[str], count: int) -> list[list[str]]:
    if not items:
        return []
    size = -(-len(items) // count)
    return [items[i : i + size] for i in range(0, len(items), size)]


def _committer(source: Path, commits: list[str]):
    def commit(subject: str, author: str | None = None) -> None:
        n = len(commits)
        when = f"{START + n * 86_400} +0000"
        git(source, "add", "--all")
        git(
            source, "commit", "--quiet", "--allow-empty",
            f"--author={author or PEOPLE[n % len(PEOPLE)]}", "-m", subject,
            env={"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when},
        )
        commits.append(git(source, "rev-parse", "HEAD"))

    return commit


def _functions(text: str) -> list[ast.FunctionDef]:
    tree = ast.parse(text)
    return [n for n in tree.body if isinstance(n, ast.FunctionDef)]


def _span(text: str, function: str) -> tuple[int, int]:
    """The character offsets of the top-level ``function`` in ``text``."""
    found = [n for n in _functions(text) if n.name == function]
    if len(found) != 1:
        raise ValueError(f"{len(found)} top-level functions named {function}")
    node = found[0]
    lines = text.splitlines(keepends=True)
    first = node.lineno - 1 - len(node.decorator_list)
    start = sum(len(x) for x in lines[:first])
    end = sum(len(x) for x in lines[: node.end_lineno])
    return start, end


def _replace_in_function(path: Path, function: str, old: str, new: str) -> None:
    text = path.read_text()
    start, end = _span(text, function)
    body = text[start:end]
    if body.count(old) != 1:
        raise ValueError(f"{path.name}: {old!r} occurs {body.count(old)} times in {function}")
    path.write_text(text[:start] + body.replace(old, new) + text[end:])


def _touch(source: Path, project: Project, regression: Regression, rng, n: int) -> str:
    """Edit one function other than the broken one, away from it: a comment where its body
    starts (after the docstring). Its name, for the commit's subject."""
    path = source / (project.source if rng.random() < 0.7 else file_of(regression))
    text = path.read_text()
    avoid = None
    if path == source / file_of(regression):
        avoid = _span(text, regression.function)
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    choices = []
    for node in _functions(text):
        body = node.body[1:] if _docstring(node) else node.body
        if not body or node.name == regression.function:
            continue
        at = body[0].lineno - 1
        if avoid and avoid[0] - 400 <= offsets[at] <= avoid[1] + 400:
            continue
        choices.append((node.name, at, body[0].col_offset))
    name, at, indent = rng.choice(choices)
    lines.insert(at, " " * indent + f"# Reviewed in maintenance round {n}.\n")
    path.write_text("".join(lines))
    return name


def _docstring(node: ast.FunctionDef) -> bool:
    first = node.body[0]
    return isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)


# Production: the released head in a directory of its own, one request that hits the bug, its
# traceback logged through the OpenTelemetry SDK's OTLP/HTTP exporter to Ephyra.
PRODUCTION = """
import logging, sys
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

url, token, version = sys.argv[1], sys.argv[2], sys.argv[3]
resource = Resource.create({{"service.name": "{module}-app", "service.version": version}})
provider = LoggerProvider(resource=resource)
provider.add_log_record_processor(SimpleLogRecordProcessor(
    OTLPLogExporter(endpoint=f"{{url}}/v1/logs", headers={{"Authorization": f"Bearer {{token}}"}})
))
log = logging.getLogger("app.requests")
log.addHandler(LoggingHandler(logger_provider=provider))
import {module}


def handle():
{call}


try:
    handle()
except Exception:
    log.exception("the request failed")
    failed = True
else:
    failed = False
provider.shutdown()
sys.exit(0 if failed else 3)
"""


def production_fails(regression: Regression, history: History, where: Path, url: str,
                     token: str) -> None:
    """Check out the remote's head and let production hit the bug once."""
    project = PROJECTS[regression.project]
    deployed = where / "production"
    git(where, "clone", "--quiet", str(history.remote), str(deployed))
    script = PRODUCTION.format(
        module=project.module, call=textwrap.indent(regression.call.replace("; ", "\n"), "    ")
    )
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script, url, token, history.head],
        cwd=deployed, capture_output=True, text=True, timeout=120,
        env={**_plain_env(), "PYTHONPATH": str(deployed)},
    )
    if run.returncode != 0:
        said = "did not raise" if run.returncode == 3 else run.stderr.strip()[-800:]
        raise RuntimeError(f"production of {regression.name}: {said}")


def suite_passes(project: Project, remote: Path, where: Path) -> tuple[bool, str]:
    """The project's suite at the remote's main, in a clean clone: passed, and its last line."""
    clone = where / "after-landing"
    git(where, "clone", "--quiet", str(remote), str(clone))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *project.tests],
        cwd=clone, capture_output=True, text=True, timeout=600,
        env={**_plain_env(), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    lines = run.stdout.strip().splitlines()
    return run.returncode == 0, lines[-1] if lines else run.stderr.strip()[-200:]


def _plain_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}


def git(where: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(where), "-c", "user.name=Bench", "-c", "user.email=bench@example.org",
         "-c", "commit.gpgsign=false", "-c", "advice.detachedHead=false", *args],
        capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()
