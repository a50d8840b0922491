"""A real headless browser for page tests: Debian's chromium, driven by Playwright.

Playwright's own browser downloads are not used (the machines are offline); the
chromium the system package installs is launched instead, with a fresh profile per
test. Background networking is switched off: on a closed network chromium's update,
sync and metrics connections are refused many at a time and slow every page down.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fixture_marks import marks_users

if TYPE_CHECKING:
    from playwright.sync_api import Page

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


@pytest.fixture
@marks_users("browser")
def browser_page(tmp_path: Path) -> Iterator[Page]:
    """A Playwright ``Page`` in a new headless chromium with an empty profile.

    Uncaught script errors on the page fail the test at teardown, so a page that breaks
    without showing it does not pass.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            tmp_path / "chromium-profile",
            executable_path=chromium_executable(),
            headless=True,
            args=list(CHROMIUM_ARGS),
            viewport={"width": 1280, "height": 900},
        )
        try:
            page = context.new_page()
            script_errors: list[str] = []
            page.on("pageerror", lambda error: script_errors.append(str(error)))
            yield page
            assert not script_errors, f"the page raised script errors: {script_errors}"
        finally:
            context.close()
