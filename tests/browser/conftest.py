"""Browser tests: Debian's chromium driven by Playwright for Python against a live server, with
a worker thread serving the workspaces, as `make run` would.

Chromium is never downloaded: the tests use /usr/bin/chromium (``apt-get install chromium``;
``.ci/run`` installs it) and skip with that instruction where it is missing. Screenshots of each
page go to a folder outside the repository, printed at the end of the run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.audit_tampering import erase_audit_log

CHROMIUM = os.environ.get("EPHYRA_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path(os.environ.get("EPHYRA_SCREENSHOTS", Path(tempfile.gettempdir()) / "ephyra-screens"))


def pytest_report_header(config):
    return f"browser screenshots: {SHOTS}"


@pytest.fixture(scope="module", autouse=True)
def _orm_beside_playwright():
    """Playwright's sync API runs an event loop in this thread; Django's ORM refuses to run
    where a loop runs unless told that the loop never calls it (here it does not). For these
    modules only, database teardowns included: the variable must not leak into later tests or
    the processes they start (``check --deploy`` refuses it)."""
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if before is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (CI installs it)")
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def serving(transactional_db, settings):
    """A worker thread serving every workspace, polling fast, for the length of the test."""
    from ephyra.compose import effect_adapters
    from worker.loop import Worker

    settings.EPHYRA_POLL_MS = 20
    settings.EPHYRA_ACTION_WAIT_MS = 10_000
    effect_adapters.cache_clear()
    worker = Worker(owner="browser-test-worker")
    worker.start()
    yield worker
    worker.stop()
    effect_adapters.cache_clear()
    erase_audit_log()  # the append-only audit rows would refuse the flush after the test


def shot(page, name: str) -> Path:
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def log_in(browser, base_url: str, username: str, password: str = "pw-for-tests-only"):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{base_url}/login/")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base_url}/")
    return page
