"""The login limiter through the real proxy setup (issue 13, items 2-4):
gunicorn started as production starts it (deploy/gunicorn.conf.py, DEBUG off,
Redis as the shared cache, two workers with threads), a "proxy" on 127.0.0.1
(FORWARDED_ALLOW_IPS) and an untrusted client on 127.0.0.2 — Linux answers on
the whole 127/8, so a client can choose its source address."""

import json
import re
import threading

import httpx
import pytest
import redis
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from tests.factories import UserFactory

from .helpers import gunicorn, manage, production_env

PASSWORD = "correct horse battery staple"
REDIS_URL = "redis://127.0.0.1:6379/13"  # this suite's own database (7 is the q clusters')

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _user(username, **extra):
    user = UserFactory(username=username, groups=["operators"], **extra)
    # The production settings do not know the tests' fast MD5 hasher.
    user.password = PBKDF2PasswordHasher().encode(PASSWORD, "saltsalt", iterations=1000)
    user.save()
    return user


def _env(tmp_path, settings, *, redis_url=REDIS_URL, workers=2):
    db = settings.DATABASES["default"]
    return production_env(
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=redis_url,
        GUNICORN_BIND="127.0.0.1:0",
        WEB_CONCURRENCY=workers,
        GUNICORN_THREADS=4,
        FORWARDED_ALLOW_IPS="127.0.0.1",
        # Longer than the test can take even on a loaded machine: past the delay
        # one more check per window is allowed, by design.
        LOGIN_BASE_DELAY_SECONDS=300,
        STATIC_ROOT=tmp_path / "static",
        # Plain http on loopback: the cookies must travel without TLS here.
        SECURE_SSL_REDIRECT=0,
        SESSION_COOKIE_SECURE=0,
        CSRF_COOKIE_SECURE=0,
    )


@pytest.fixture
def console(tmp_path, settings):
    r = redis.Redis.from_url(REDIS_URL)
    r.flushdb()
    env = _env(tmp_path, settings)
    done = manage("collectstatic", "--noinput", "-v", "0", env=env)
    assert done.returncode == 0, done.stderr
    try:
        with gunicorn(env, tmp_path / "gunicorn.log", start_timeout=60) as url:
            yield url
    finally:
        r.flushdb()


class Browser:
    """One cookie jar and CSRF token, connecting from `source`."""

    def __init__(self, url, source="127.0.0.1"):
        # No keep-alive: gunicorn closes idle connections after 2 s, and a POST
        # on a connection it just closed is not retried.
        transport = httpx.HTTPTransport(
            local_address=source, limits=httpx.Limits(max_keepalive_connections=0)
        )
        self.http = httpx.Client(base_url=url, transport=transport, timeout=60)
        page = self.http.get("/accounts/login/")
        assert page.status_code == 200
        self.token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)[1]

    def login(self, username, password, *, forwarded_for=None, path="/accounts/login/"):
        headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
        return self.http.post(
            path,
            data={"username": username, "password": password, "csrfmiddlewaretoken": self.token},
            headers=headers,
        )


def test_the_limiter_behind_the_proxy(console):
    for name in ("victim", "bob", "carol", "dave"):
        _user(name)
    _user("erin", is_staff=True)
    proxy = Browser(console)  # every request reaches gunicorn from the proxy's address

    # Item 2: five bad logins from one client lock that account's budget only.
    for _ in range(5):
        assert proxy.login("victim", "nope", forwarded_for="203.0.113.66").status_code == 200
    refused = proxy.login("victim", PASSWORD, forwarded_for="203.0.113.66")
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert proxy.login("bob", PASSWORD, forwarded_for="198.51.100.7").status_code == 302

    # Item 3: a look-alike spelling of the locked account is the same account.
    fresh = Browser(console)
    assert fresh.login("ｖｉｃｔｉｍ", PASSWORD, forwarded_for="198.51.100.8").status_code == 429

    # An untrusted client's X-Forwarded-For is ignored: spoofing fresh addresses
    # buys no fresh budget; its own address (127.0.0.2) is counted.
    stranger = Browser(console, source="127.0.0.2")
    codes = [
        stranger.login(f"nobody{i}", "nope", forwarded_for=f"10.0.0.{i}").status_code
        for i in range(21)
    ]
    assert codes == [200] * 20 + [429]
    # ...while those spoofed addresses, when the proxy vouches for them, are fine.
    assert Browser(console).login("dave", PASSWORD, forwarded_for="10.0.0.1").status_code == 302

    # Item 4: forty parallel bad logins get exactly the sequential five checks,
    # counted in Redis across two workers.
    statuses, barrier = [], threading.Barrier(40)
    browsers = [Browser(console) for _ in range(40)]

    def attempt(i):
        barrier.wait()
        statuses.append(
            browsers[i].login("carol", "nope", forwarded_for=f"192.0.2.{i}").status_code
        )

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(statuses) == [200] * 5 + [429] * 35

    # Item 4: Django admin's login form is limited, with the same account budget.
    admin = Browser(console)
    for i in range(5):
        bad = admin.login("erin", "nope", forwarded_for=f"192.0.2.{100 + i}", path="/admin/login/")
        assert bad.status_code == 200
    blocked = admin.login("erin", PASSWORD, forwarded_for="192.0.2.200", path="/admin/login/")
    assert blocked.status_code == 429


def test_with_redis_down_sign_in_is_refused_in_words_and_logged_once(tmp_path, settings):
    """Regression: with Redis stopped every login POST answered 500."""
    _user("victim")
    env = _env(tmp_path, settings, redis_url="redis://127.0.0.1:1/0", workers=1)
    done = manage("collectstatic", "--noinput", "-v", "0", env=env)
    assert done.returncode == 0, done.stderr
    log = tmp_path / "gunicorn.log"
    with gunicorn(env, log, start_timeout=60) as url:
        browser = Browser(url)  # the login page itself stays up
        answers = [browser.login("victim", PASSWORD, forwarded_for="203.0.113.9") for _ in range(3)]
        assert browser.http.get("/accounts/login/").status_code == 200
    assert [a.status_code for a in answers] == [503] * 3
    assert "Sign-in is briefly unavailable; try again in a minute." in answers[0].text
    outages = [
        line
        for line in log.read_text().splitlines()
        if line.startswith("{") and "login limiter" in json.loads(line).get("message", "")
    ]
    assert len(outages) == 1, outages
    assert json.loads(outages[0])["level"] == "ERROR"
