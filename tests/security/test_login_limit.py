"""The login limiter (issue 13, items 2-4): the client address comes from a
trusted proxy only, each account has its own budget with a growing delay, a
look-alike spelling of a username shares its budget, parallel attempts cannot
outrun the count, and Django admin's login form is limited too.

tests/deploy/test_login_proxy.py runs the same rules through gunicorn."""

import threading

import pytest
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.db import connection
from django.test import Client, RequestFactory
from django.urls import reverse

from tests.factories import UserFactory

from .conftest import PASSWORD

pytestmark = pytest.mark.django_db

PROXY = "127.0.0.1"  # FORWARDED_ALLOW_IPS' default


def _login(username, password, *, via=PROXY, client_at=None, url=None, client=None):
    extra = {"REMOTE_ADDR": via}
    if client_at:
        extra["HTTP_X_FORWARDED_FOR"] = client_at
    client = client or Client()
    response = client.post(
        url or reverse("login"), {"username": username, "password": password}, **extra
    )
    return response


def _signed_in(response) -> bool:
    return "_auth_user_id" in response.wsgi_request.session


@pytest.fixture
def victim(db):
    return UserFactory(username="victim", groups=["operators"])


@pytest.fixture
def bob(db):
    return UserFactory(username="bob", groups=["operators"])


def _gate_expires():
    """What the delay's passing looks like to the limiter: its gates are gone."""
    for key in list(cache._cache):  # locmem (the test settings' cache): ":1:<key>"
        if key.endswith(":opens"):
            cache.delete(key.split(":", 2)[2])


# --- the client address ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("remote", "forwarded", "allow", "expected"),
    [
        ("127.0.0.1", "203.0.113.5", ["127.0.0.1"], "203.0.113.5"),
        # A chain: the right-most entry that is not a trusted proxy is the client;
        # entries left of it were written by the client and prove nothing.
        ("127.0.0.1", "1.1.1.1, 203.0.113.5, 10.0.0.2", ["127.0.0.1", "10.0.0.0/8"], "203.0.113.5"),
        ("127.0.0.1", "  ", ["127.0.0.1"], "127.0.0.1"),
        ("127.0.0.1", "not-an-ip", ["127.0.0.1"], "127.0.0.1"),
        ("127.0.0.1", "[2001:db8::1]:443", ["127.0.0.1"], "2001:db8::1"),
        # Not from a trusted proxy: the header is anyone's to write.
        ("198.51.100.9", "203.0.113.5", ["127.0.0.1"], "198.51.100.9"),
        ("198.51.100.9", "203.0.113.5", ["*"], "203.0.113.5"),
        ("::1", "203.0.113.5", ["127.0.0.1", "::1"], "203.0.113.5"),
    ],
)
def test_the_client_address_comes_only_from_a_trusted_proxy(
    settings, remote, forwarded, allow, expected
):
    from sandboxes.views.auth import client_ip

    settings.FORWARDED_ALLOW_IPS = allow
    request = RequestFactory().get("/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)
    assert client_ip(request) == expected


def test_the_setting_is_read_from_the_variable_gunicorn_reads():
    from pathlib import Path

    from paperclip_console import settings as module

    assert 'envlist("FORWARDED_ALLOW_IPS"' in Path(module.__file__).read_text()
    root = Path(module.__file__).parents[1]
    assert "FORWARDED_ALLOW_IPS" in (root / "deploy/gunicorn.conf.py").read_text()


# --- item 2: behind the proxy, one attacker cannot lock everybody out ----------------------


def test_bad_logins_behind_the_proxy_lock_nobody_else_out(victim, bob):
    """Regression: every request's REMOTE_ADDR is the proxy, and five bad logins
    from one attacker locked out every user for five minutes."""
    for i in range(5):
        assert _login(f"guess{i}", "nope", client_at="203.0.113.66").status_code == 200
    response = _login("bob", PASSWORD, client_at="198.51.100.7")
    assert response.status_code == 302 and _signed_in(response)


def test_an_account_gets_five_checks_then_a_growing_delay(victim):
    waits = []
    for _ in range(5):
        assert _login("victim", "nope", client_at="203.0.113.66").status_code == 200
    for _ in range(4):
        refused = _login("victim", PASSWORD, client_at="198.51.100.1")
        assert refused.status_code == 429 and not _signed_in(refused)
        assert b"Too many failed attempts" in refused.content
        waits.append(int(refused["Retry-After"]))
        _gate_expires()
        # One more check per delay window; it fails, and the next window is longer.
        assert _login("victim", "nope", client_at="203.0.113.66").status_code == 200
    # Seconds left when refused (a loaded machine may have used a few of them).
    assert all(e - 3 <= w <= e for w, e in zip(waits, [5, 10, 20, 40], strict=True)), waits
    _gate_expires()
    # The owner, after the delay, gets in; that clears the account's count.
    ok = _login("victim", PASSWORD, client_at="198.51.100.1")
    assert ok.status_code == 302 and _signed_in(ok)
    for _ in range(5):
        assert _login("victim", "nope", client_at="203.0.113.66").status_code == 200


def test_one_address_trying_many_accounts_is_slowed_down_too(victim):
    for i in range(20):
        assert _login(f"user{i}", "nope", client_at="203.0.113.66").status_code == 200
    assert _login("victim", PASSWORD, client_at="203.0.113.66").status_code == 429
    assert _login("victim", PASSWORD, client_at="203.0.113.67").status_code == 302


def test_successful_logins_from_one_office_do_not_add_up(victim):
    for _ in range(30):
        assert _login("victim", PASSWORD, client_at="203.0.113.10").status_code == 302


# --- item 3: look-alike usernames ------------------------------------------------------------


def test_django_signs_a_fullwidth_username_in_as_its_ascii_twin(victim):
    """Why the key must be normalised: authenticate() NFKC-normalises the
    username (django.contrib.auth.forms.UsernameField.to_python)."""
    response = _login("ｖｉｃｔｉｍ", PASSWORD, client_at="198.51.100.1")
    assert response.status_code == 302
    assert response.wsgi_request.user.username == "victim"


@pytest.mark.parametrize(
    "spelling", ["ｖｉｃｔｉｍ", "VICTIM", "Victim", " victim ", "ＶＩＣＴＩＭ"]
)
def test_look_alike_usernames_share_the_account_budget(victim, spelling):
    """Regression: `ｖｉｃｔｉｍ` logged in as `victim` with a fresh budget."""
    for i in range(5):  # from five addresses: only the account's budget is spent
        _login("victim", "nope", via=f"203.0.113.{i}")
    response = _login(spelling, PASSWORD, via="198.51.100.1")
    assert response.status_code == 429 and not _signed_in(response)


def test_the_key_is_nfkc_and_case_folded():
    from sandboxes.views.auth import account_key

    assert account_key("ｖｉｃｔｉｍ") == account_key("VICTIM") == "victim"
    assert account_key(" victim") == "victim"
    assert account_key("straße") == account_key("STRASSE")
    assert account_key("victim") != account_key("victím")


# --- item 4: parallel attempts and the admin login -----------------------------------------


@pytest.mark.django_db(transaction=True)
def test_parallel_attempts_get_exactly_the_sequential_budget(monkeypatch, settings):
    """Regression: of 40 concurrent bad logins 9-14 were checked against the
    password, where the sequential limit is 5. Count the checks themselves."""
    settings.LOGIN_BASE_DELAY_SECONDS = 300  # no window passes during the burst
    UserFactory(username="carol", groups=["operators"])
    checks = []
    lock = threading.Lock()
    real = ModelBackend.authenticate

    def counting(self, request, username=None, password=None, **kwargs):
        with lock:
            checks.append(username)
        return real(self, request, username=username, password=password, **kwargs)

    monkeypatch.setattr(ModelBackend, "authenticate", counting)
    barrier = threading.Barrier(40)
    statuses = []

    def attempt(i):
        try:
            barrier.wait()
            statuses.append(_login("carol", "nope", client_at=f"203.0.113.{i}").status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(statuses) == 40
    assert len(checks) == 5
    assert sorted(statuses) == [200] * 5 + [429] * 35


def test_the_admin_login_is_limited_with_the_same_budget(victim):
    """Regression: /admin/login/ had no limit at all."""
    victim.is_staff = True
    victim.save()
    admin_login = "/admin/login/"
    for i in range(3):
        _login("victim", "nope", client_at=f"203.0.113.{i}", url=admin_login)
    for i in range(2):
        _login("victim", "nope", client_at=f"203.0.113.{i}")
    refused = _login("victim", PASSWORD, client_at="198.51.100.1", url=admin_login)
    assert refused.status_code == 429 and not _signed_in(refused)


def test_the_admin_login_still_works(victim):
    victim.is_staff = victim.is_superuser = True
    victim.save()
    response = _login("victim", PASSWORD, url="/admin/login/?next=/admin/")
    assert response.status_code == 302 and _signed_in(response)
