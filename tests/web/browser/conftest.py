"""Browser tests: Debian's Chromium driven by Playwright's sync API (never ``playwright
install``). Run in their own pytest process (``./scripts/test`` does): Playwright's sync API
keeps an event loop running in this thread, so Django's async-safety check is switched off
for this process, as the live server's ORM calls are still synchronous and safe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "browser"


@pytest.fixture(scope="session")
def chromium():
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install it with `apt-get install -y chromium` "
                    "(./scripts/test does this through `scripts/services browser`)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
