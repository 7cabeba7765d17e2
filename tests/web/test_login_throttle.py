"""Login throttling (issue 16: 30 wrong passwords in 9.5 s were all answered and the account
stayed open): per account and per address, with a clear message; even the right password is
refused while locked."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from kalena_web.console import login

PASSWORD = "correct horse battery staple"


@pytest.fixture
def alice(db, settings, monkeypatch):
    """A user; the limits lowered and a fast hasher, so the test spends no minute hashing."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    monkeypatch.setattr(login, "ACCOUNT_FAILURES", 3)
    monkeypatch.setattr(login, "ADDRESS_FAILURES", 6)
    cache.clear()
    yield User.objects.create_user("alice", password=PASSWORD)
    cache.clear()


def _try(client: Client, username: str, password: str):
    return client.post("/accounts/login/", {"username": username, "password": password})


def test_an_account_locks_after_repeated_failures_even_for_the_right_password(alice) -> None:
    client = Client(REMOTE_ADDR="10.0.0.1")
    answers = [_try(client, "alice", "wrong").status_code for _ in range(login.ACCOUNT_FAILURES)]
    assert answers == [200] * login.ACCOUNT_FAILURES  # the form again, with the error
    locked = _try(Client(REMOTE_ADDR="10.0.0.2"), "alice", PASSWORD)  # another address, right password
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert "Too many failed logins" in locked.content.decode() and "_auth_user_id" not in client.session
    assert "minute(s)" not in locked.content.decode()


def test_one_address_is_throttled_across_accounts(alice) -> None:
    client = Client(REMOTE_ADDR="10.0.0.9")
    for i in range(login.ADDRESS_FAILURES):
        assert _try(client, f"nobody-{i}", "wrong").status_code == 200
    assert _try(client, "alice", PASSWORD).status_code == 429
    assert _try(Client(REMOTE_ADDR="10.0.0.10"), "alice", PASSWORD).status_code == 302  # elsewhere: fine


def test_a_success_clears_the_account_count(alice) -> None:
    client = Client(REMOTE_ADDR="10.0.0.3")
    for _ in range(login.ACCOUNT_FAILURES - 1):
        _try(client, "alice", "wrong")
    assert _try(client, "alice", PASSWORD).status_code == 302
    assert _try(Client(REMOTE_ADDR="10.0.0.4"), "alice", "wrong").status_code == 200  # count restarted
