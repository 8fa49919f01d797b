"""Playwright driving Debian's chromium against pytest-django's live server."""

import os
import shutil
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in this thread; Django would
# otherwise refuse database access from it.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

from devtools.screenshots import CHROMIUM, CHROMIUM_ARGS

SCREENSHOTS = Path(__file__).resolve().parents[3] / "artifacts" / "screenshots"
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="session")
def browser():
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (bin/ensure-services installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
        )
        yield browser
        browser.close()


@pytest.fixture
def local(tmp_path, settings):
    """A local provider on real sandboxes under tmp_path; salvage in tmp_path too."""
    from sandboxes.providers.local import LocalProvider

    settings.MEDIA_ROOT = tmp_path / "media"
    return LocalProvider(root=tmp_path / "sandboxes", budget_seconds=5)


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def shot():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name: str, full_page: bool = True):
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)

    return take


def log_in(page, live_server, username: str, password: str = PASSWORD):
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{live_server.url}/")
