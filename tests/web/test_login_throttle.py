"""Login throttling: per account and client, and per client, with a clear message; even the
right password is refused while locked — but only for the client that failed. Behind a reverse
proxy the client is the one the trusted proxy names; one client cannot lock another out of its
own account, a header from anyone but the proxy is ignored, unknown user names never count
against a real account, every lock-out is audited and every refused attempt counted."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from kalena_web.console import login
from kalena_web.console.clients import client_address
from kalena_web.policy.models import AuditEntry
from kalena_web.settings import _trusted_proxies

PASSWORD = "correct horse battery staple"
PROXY = "10.0.0.2"            # the ingress: the peer of every request that came through it


@pytest.fixture
def alice(db, settings, monkeypatch):
    """A user; the limits lowered and a fast hasher, so the test spends no minute hashing; the
    console behind a proxy at 10.0.0.0/24 that names the client in X-Forwarded-For."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.KALENA_TRUSTED_PROXY_HEADER = "X-Forwarded-For"
    settings.KALENA_TRUSTED_PROXIES = ("10.0.0.0/24",)
    monkeypatch.setattr(login, "ACCOUNT_FAILURES", 3)
    monkeypatch.setattr(login, "ADDRESS_FAILURES", 6)
    cache.clear()
    yield User.objects.create_user("alice", password=PASSWORD)
    cache.clear()


def through_proxy(client_ip: str, *, chain: str = "") -> Client:
    """A browser at ``client_ip`` reaching the console through the proxy (which appends the
    address it received the request from to whatever the browser sent)."""
    return Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=f"{chain + ', ' if chain else ''}{client_ip}")


def _try(client: Client, username: str, password: str):
    return client.post("/accounts/login/", {"username": username, "password": password})


def refusals(client: Client) -> dict[str, float]:
    families = text_string_to_metric_families(client.get("/metrics").content.decode())
    return {s.labels["scope"]: s.value for f in families if f.name == "kalena_login_refusals"
            for s in f.samples if s.name == "kalena_login_refusals_total"}


def test_an_account_locks_for_the_failing_client_even_for_the_right_password(alice) -> None:
    client = Client(REMOTE_ADDR="192.0.2.1")
    answers = [_try(client, "alice", "wrong").status_code for _ in range(login.ACCOUNT_FAILURES)]
    assert answers == [200] * login.ACCOUNT_FAILURES  # the form again, with the error
    locked = _try(client, "alice", PASSWORD)
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert "Too many failed logins" in locked.content.decode() and "_auth_user_id" not in client.session
    assert "minute(s)" not in locked.content.decode()


def test_one_address_is_throttled_across_accounts(alice) -> None:
    client = Client(REMOTE_ADDR="192.0.2.9")
    for i in range(login.ADDRESS_FAILURES):
        assert _try(client, f"nobody-{i}", "wrong").status_code == 200
    assert _try(client, "alice", PASSWORD).status_code == 429
    assert _try(Client(REMOTE_ADDR="192.0.2.10"), "alice", PASSWORD).status_code == 302  # elsewhere: fine


def test_a_success_clears_the_account_count(alice) -> None:
    client = Client(REMOTE_ADDR="192.0.2.3")
    for _ in range(login.ACCOUNT_FAILURES - 1):
        _try(client, "alice", "wrong")
    assert _try(client, "alice", PASSWORD).status_code == 302
    again = Client(REMOTE_ADDR="192.0.2.3")
    for _ in range(login.ACCOUNT_FAILURES - 1):                 # count restarted
        assert _try(again, "alice", "wrong").status_code == 200


def test_behind_the_proxy_one_client_failing_cannot_lock_another_out_of_its_own_account(alice) -> None:
    attacker = through_proxy("203.0.113.5")
    for _ in range(login.ADDRESS_FAILURES + 5):                 # past both limits
        _try(attacker, "alice", "wrong")
    assert _try(attacker, "alice", PASSWORD).status_code == 429   # the failing client itself is locked
    operator = through_proxy("198.51.100.7")                    # the same proxy, another client
    assert _try(operator, "alice", PASSWORD).status_code == 302
    assert operator.session["_auth_user_id"] == str(alice.pk)


@pytest.mark.parametrize(("addresses", "elsewhere"), [
    # an IPv6 host holds a whole /64 (SLAAC, privacy addresses): a new address every try is the
    # same client, or it could guess a password without end
    pytest.param([f"2001:db8:5:6::{i + 1:x}" for i in range(8)], "2001:db8:5:7::1", id="IPv6 addresses in one /64"),
    # a dual-stack listener may name an IPv4 client in its IPv4-mapped IPv6 form
    pytest.param(["::ffff:192.0.2.44", "192.0.2.44"] * 4, "192.0.2.45", id="IPv4 and its IPv4-mapped form"),
])
def test_a_client_changing_its_address_within_its_own_network_is_still_one_client(alice, addresses,
                                                                                   elsewhere) -> None:
    for address in addresses[:login.ACCOUNT_FAILURES]:
        assert _try(through_proxy(address), "alice", "wrong").status_code == 200
    assert _try(through_proxy(addresses[login.ACCOUNT_FAILURES]), "alice", PASSWORD).status_code == 429
    assert _try(through_proxy(elsewhere), "alice", PASSWORD).status_code == 302   # another network: fine


def test_a_forwarded_header_from_a_peer_that_is_not_a_trusted_proxy_is_ignored(alice) -> None:
    for i in range(login.ACCOUNT_FAILURES):                     # a new claimed address every time
        spoofer = Client(REMOTE_ADDR="192.0.2.66", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}")
        assert _try(spoofer, "alice", "wrong").status_code == 200
    spoofer = Client(REMOTE_ADDR="192.0.2.66", HTTP_X_FORWARDED_FOR="198.51.100.200")
    assert _try(spoofer, "alice", PASSWORD).status_code == 429   # all counted against its own address
    lockout = AuditEntry.objects.get(action="login.lockout")
    assert lockout.after["client_address"] == "192.0.2.66" and lockout.after["peer"] == "192.0.2.66"
    # the client's own claim left of what the proxy appended is not taken either
    assert _try(through_proxy("203.0.113.9", chain="192.0.2.66"), "alice", PASSWORD).status_code == 302


def test_unknown_user_names_do_not_lock_a_real_account(alice) -> None:
    client = through_proxy("203.0.113.7")
    for name in ["Alice", "ALICE", "aLiCe", "alicia", "root"]:  # under the address limit (6)
        assert _try(client, name, "wrong").status_code == 200
    assert _try(client, "alice", PASSWORD).status_code == 302
    # an unknown name has a count of its own, with the account's limit: the answers do not
    # tell a client which user names exist
    guesser = through_proxy("203.0.113.77")
    assert [_try(guesser, "bob", "wrong").status_code for _ in range(login.ACCOUNT_FAILURES + 1)] == \
        [200] * login.ACCOUNT_FAILURES + [429]
    assert _try(through_proxy("203.0.113.78"), "alice", PASSWORD).status_code == 302


def test_another_spelling_of_the_user_name_the_form_signs_in_with_shares_the_accounts_count(alice) -> None:
    """The login form strips the user name and NFKC-normalises it before looking the account
    up: ``alice `` and the full-width ``ａｌｉｃｅ`` sign in to ``alice``, so they must count as
    ``alice`` — else each spelling would be a fresh count and the account's limit no limit."""
    client = through_proxy("203.0.113.40")
    spellings = ["alice ", " alice", "ａｌｉｃｅ", "\talice", "ａlice "]
    for name in spellings[:login.ACCOUNT_FAILURES]:
        assert _try(client, name, "wrong").status_code == 200
    assert _try(client, spellings[login.ACCOUNT_FAILURES], PASSWORD).status_code == 429
    assert "_auth_user_id" not in client.session
    assert _try(through_proxy("203.0.113.41"), "ａｌｉｃｅ", PASSWORD).status_code == 302   # elsewhere: fine


def test_a_lock_out_is_audited_with_who_and_from_where(alice) -> None:
    client = through_proxy("203.0.113.5")
    for _ in range(login.ACCOUNT_FAILURES):
        _try(client, "alice", "wrong")
    entry = AuditEntry.objects.get(action="login.lockout")
    assert entry.actor == "alice from 203.0.113.5" and entry.target == "account alice"
    assert entry.after["scope"] == "account" and entry.after["client_address"] == "203.0.113.5"
    assert entry.after["peer"] == PROXY and entry.after["failures"] == login.ACCOUNT_FAILURES
    assert entry.after["account_exists"] is True
    assert entry.after["until_s"] - entry.after["since_s"] == login.WINDOW_S
    for i in range(login.ADDRESS_FAILURES - login.ACCOUNT_FAILURES):
        _try(client, f"nobody-{i}", "wrong")
    assert AuditEntry.objects.filter(action="login.lockout", after__scope="address",
                                     after__client_address="203.0.113.5").count() == 1


def test_refused_attempts_are_counted_in_metrics(alice) -> None:
    client = through_proxy("203.0.113.8")
    before = refusals(client)
    for _ in range(login.ACCOUNT_FAILURES):
        _try(client, "alice", "wrong")
    for _ in range(2):
        assert _try(client, "alice", PASSWORD).status_code == 429
    after = refusals(client)
    assert after.get("account", 0) - before.get("account", 0) == 2


@pytest.mark.parametrize(("peer", "forwarded", "expected"), [
    # the proxy appended the browser's address: taken
    ("10.0.0.2", "203.0.113.5", "203.0.113.5"),
    # the browser claimed 6.6.6.6 itself; two trusted proxies appended after the real client
    ("10.0.0.2", "6.6.6.6, 203.0.113.5, 10.0.0.3", "203.0.113.5"),
    # not a trusted proxy: its header is ignored
    ("192.0.2.9", "203.0.113.5", "192.0.2.9"),
    # no header: the peer
    ("10.0.0.2", None, "10.0.0.2"),
    # garbage left of the last good address ends the walk there
    ("10.0.0.2", "not-an-ip, 203.0.113.5", "203.0.113.5"),
    # ports and IPv6 brackets as some proxies write them
    ("10.0.0.2", "[2001:db8::1]:4711", "2001:db8::1"),
    ("10.0.0.2", "203.0.113.5:4711", "203.0.113.5"),
])
def test_the_client_address_is_read_right_to_left_past_trusted_proxies_only(peer, forwarded, expected) -> None:
    assert client_address(peer, forwarded, trusted=("10.0.0.0/24",)) == expected


@pytest.mark.parametrize(("header", "proxies", "message"), [
    ("X-Forwarded-For", "", "needs KALENA_TRUSTED_PROXIES"),
    ("X-Forwarded-For", "10.0.0.0/8, ingress.local", "'ingress.local' is not an IP address or network"),
    ("X Forwarded For", "10.0.0.1", "is not a header name"),
])
def test_a_bad_trusted_proxy_setting_is_refused_naming_it(header, proxies, message) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        _trusted_proxies(header, proxies)
