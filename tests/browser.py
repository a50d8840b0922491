"""A real headless browser for page tests: Debian's chromium, driven by Playwright.

Playwright's own browser downloads are not used (the machines are offline); the
chromium the system package installs is launched instead, once per test module
(launching costs seconds of CPU), and each test gets a fresh context of its own (no
cookies, storage or cache from another test). Background networking is switched off:
on a closed network chromium's update, sync and metrics connections are refused many
at a time and slow every page down.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from fixture_marks import marks_users

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

#: Flags for a quiet, offline, headless chromium in a container.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium_executable() -> str:
    """The path of Debian's chromium; a clear error when it is not installed."""
    found = shutil.which("chromium") or shutil.which("/usr/bin/chromium")
    if found is None:
        raise RuntimeError("no chromium on this machine: install Debian's chromium (make installs it)")
    return found


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """A headless chromium shared by the tests of a module; ``browser_page`` isolates them."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable(), headless=True, args=list(CHROMIUM_ARGS)
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
@marks_users("browser")
def browser_page(chromium: Browser) -> Iterator[Page]:
    """A Playwright ``Page`` in a new, empty browser context of the module's chromium.

    Uncaught script errors on the page fail the test at teardown, so a page that breaks
    without showing it does not pass.
    """
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        script_errors: list[str] = []
        page.on("pageerror", lambda error: script_errors.append(str(error)))
        yield page
        assert not script_errors, f"the page raised script errors: {script_errors}"
    finally:
        context.close()
