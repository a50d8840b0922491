"""A real headless browser for page tests: Debian's chromium, driven by Playwright.

Playwright's own browser downloads are not used (the machines are offline); the
chromium the system package installs is launched instead, once for consecutive page
tests (``SharedChromium``). Background networking is switched off: on a closed network
chromium's update, sync and metrics connections are refused many at a time and slow
every page down.
"""

from __future__ import annotations

import shutil
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

import pytest

from support.fixture_marks import marks_users

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright

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


class SharedChromium:
    """A headless chromium kept open from one page test to the next (a launch costs
    seconds of CPU); each test isolates itself in a context of its own.

    It is closed before any other test runs: while Playwright's sync API is open it
    marks an event loop as running in the thread, and ``asyncio.run`` refuses to start.
    """

    def __init__(self) -> None:
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None

    def browser(self) -> Browser:
        if self._browser is None:
            from playwright.sync_api import sync_playwright

            self._playwright = sync_playwright().start()
            self._browser = self._playwright.chromium.launch(
                executable_path=chromium_executable(), headless=True, args=list(CHROMIUM_ARGS)
            )
        return self._browser

    def close(self) -> None:
        if self._browser is not None:
            self._browser.close()
        if self._playwright is not None:
            self._playwright.stop()
        self._playwright = self._browser = None


_CHROMIUM = SharedChromium()


@pytest.fixture
@marks_users("browser")
def browser_page() -> Iterator[Page]:
    """A Playwright ``Page`` in a new, empty browser context (no cookies, storage or
    cache from another test) of the shared chromium.

    Uncaught script errors on the page fail the test at teardown, so a page that breaks
    without showing it does not pass.
    """
    context = _CHROMIUM.browser().new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        script_errors: list[str] = []
        page.on("pageerror", lambda error: script_errors.append(str(error)))
        yield page
        assert not script_errors, f"the page raised script errors: {script_errors}"
    finally:
        context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    """After a test, close the shared chromium unless the next test takes a page too."""
    try:
        return (yield)
    finally:
        if "browser_page" not in getattr(nextitem, "fixturenames", ()):
            _CHROMIUM.close()
