"""In a real browser: the console links the interactive API docs, which need a login and draw
every operation from Kalena's own static files; and a throttled login says so. Screenshots are
kept in artifacts/browser/."""

from __future__ import annotations

import re

import pytest
from django.core.cache import cache

from kalena_web.console import login
from tests.web.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_api_docs_open_from_the_console_after_login(live_server, chromium, django_user_model, artifacts) -> None:
    django_user_model.objects.create_user(username="operator", password=PASSWORD)
    page = chromium.new_page(viewport={"width": 1440, "height": 1000})
    outside = []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(live_server.url) else None)
    try:
        page.goto(f"{live_server.url}/api/docs")
        assert "/accounts/login/?next=/api/docs" in page.url  # anonymous: sent to log in first
        page.fill("#id_username", "operator")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/api/docs$"))
        page.goto(f"{live_server.url}/live/")
        page.click("text=API docs")
        page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
        paths = page.eval_on_selector_all(".opblock-summary-path", "els => els.map(e => e.textContent)")
        assert "/api/clusters" in [p.strip().replace("\u200b", "") for p in paths]
        assert outside == []  # nothing loaded from a CDN
        target = artifacts / "api-docs.png"
        page.screenshot(path=str(target), full_page=False)
        assert target.stat().st_size > 20_000
    finally:
        page.close()


def test_a_throttled_login_says_so(live_server, chromium, django_user_model, artifacts, monkeypatch) -> None:
    django_user_model.objects.create_user(username="operator", password=PASSWORD)
    monkeypatch.setattr(login, "ACCOUNT_FAILURES", 2)
    cache.clear()
    page = chromium.new_page(viewport={"width": 1000, "height": 700})
    try:
        for password in ("wrong", "wrong", PASSWORD):
            page.goto(f"{live_server.url}/accounts/login/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", password)
            page.click("button[type=submit]")
            page.wait_for_load_state()
        assert "Too many failed logins" in page.content() and "/accounts/login/" in page.url
        page.screenshot(path=str(artifacts / "login-throttled.png"))
    finally:
        page.close()
        cache.clear()
