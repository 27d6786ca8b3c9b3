"""The front end in a real headless browser: Debian's chromium driven by Playwright
through ``executable_path`` (no browser download; ``playwright install`` is never run),
and a real boundctx serve on loopback for each test (the ``serve`` fixture of
tests/conftest.py)."""

import pytest

from tests._support.chromium import chromium_path


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium for the session. Playwright adds --no-sandbox itself (the
    sandbox cannot start as root), which is what lets it run in CI containers."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the browser tests need Playwright: pip install '.[test]'")
    executable = chromium_path()
    if executable is None:
        pytest.skip("the browser tests need a chromium executable (none at /usr/lib/chromium/chromium "
                    "or on PATH): apt-get install chromium")
    playwright = sync_playwright().start()
    try:
        launched = playwright.chromium.launch(executable_path=executable, headless=True)
    except BaseException:
        playwright.stop()
        raise
    try:
        yield launched
    finally:
        launched.close()
        playwright.stop()


@pytest.fixture
def page(browser):
    """A fresh page (in its own context) for each test; 15 s default timeout."""
    opened = browser.new_page()
    opened.set_default_timeout(15_000)
    yield opened
    opened.close()


@pytest.fixture
def folder(tmp_path):
    """An empty sessions folder for the test's server."""
    d = tmp_path / "sessions"
    d.mkdir()
    return d

