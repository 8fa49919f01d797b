"""The login limiter while its cache (Redis in production) is down: sign-in is
refused in words with a 503, never a 500; the outage is logged once, not per
attempt; every other page stays up; and when the cache answers again sign-in
opens and the next outage is logged again.

The cache is a real RedisCache pointed at a closed port, as production sees a
stopped Redis."""

import logging

import pytest
from django.contrib.auth import user_logged_in
from django.test import Client, override_settings
from django.urls import reverse

from tests.factories import UserFactory

from .conftest import PASSWORD

pytestmark = pytest.mark.django_db

REDIS_DOWN = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1
        "OPTIONS": {"socket_connect_timeout": 1},
    }
}
UNAVAILABLE = "Sign-in is briefly unavailable; try again in a minute."
LOGGER = "sandboxes.views.auth"


@pytest.fixture
def victim(db):
    return UserFactory(username="victim", groups=["operators"])


@pytest.fixture(autouse=True)
def _limiter_answering(db):
    """Each test starts with the limiter's cache answering (an outage seen by an
    earlier test is over), as a process that has counted one login sees it."""
    Client().post(reverse("login"), {"username": "nobody", "password": "x"})


def _login(password=PASSWORD, *, url=None, client=None):
    client = client or Client()
    return client.post(url or reverse("login"), {"username": "victim", "password": password})


def _signed_in(response) -> bool:
    return "_auth_user_id" in response.wsgi_request.session


def _outage_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and "cache" in r.getMessage().lower()]


def test_a_login_while_the_cache_is_down_is_refused_in_words_not_a_500(victim):
    with override_settings(CACHES=REDIS_DOWN):
        response = _login()
    assert response.status_code == 503
    assert UNAVAILABLE in response.content.decode()
    assert response["Retry-After"] == "60"
    assert not _signed_in(response)


def test_the_admin_login_is_refused_the_same_way(victim):
    with override_settings(CACHES=REDIS_DOWN):
        response = _login(url="/admin/login/?next=/admin/")
    assert response.status_code == 503
    assert UNAVAILABLE in response.content.decode()


def test_the_outage_is_logged_once_across_many_attempts(victim, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with override_settings(CACHES=REDIS_DOWN):
        statuses = [_login(password).status_code for password in (PASSWORD, "nope", "x", "y")]
    assert statuses == [503] * 4
    (record,) = _outage_records(caplog)
    assert record.levelno == logging.ERROR
    assert "ConnectionError" in record.getMessage()


def test_when_the_cache_answers_again_sign_in_opens_and_a_new_outage_is_logged(victim, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with override_settings(CACHES=REDIS_DOWN):
        assert _login().status_code == 503
    back = _login()  # the test settings' local-memory cache
    assert back.status_code == 302 and _signed_in(back)
    with override_settings(CACHES=REDIS_DOWN):
        assert _login().status_code == 503
    levels = [r.levelno for r in _outage_records(caplog)]
    assert levels == [logging.ERROR, logging.INFO, logging.ERROR]


def test_pages_stay_up_while_the_cache_is_down(victim):
    signed_in = Client()
    signed_in.force_login(victim)
    with override_settings(CACHES=REDIS_DOWN):
        assert Client().get(reverse("login")).status_code == 200
        assert signed_in.get(reverse("dashboard")).status_code == 200
        assert signed_in.get(reverse("passes")).status_code == 200
        # A form with nothing to check never reaches the limiter: the form says why.
        empty = Client().post(reverse("login"), {"username": "victim", "password": ""})
        assert empty.status_code == 200


def test_a_cache_that_dies_after_the_count_does_not_undo_the_sign_in(victim, caplog):
    """The password was counted and checked; only the bookkeeping after it
    (clearing the account's count) fails: the user is signed in, no 500."""
    stop = override_settings(CACHES=REDIS_DOWN)

    def cache_dies(sender, **kwargs):
        stop.enable()

    user_logged_in.connect(cache_dies)
    try:
        response = _login()
    finally:
        user_logged_in.disconnect(cache_dies)
        stop.disable()
    assert response.status_code == 302
    assert _signed_in(response)
    assert len(_outage_records(caplog)) == 1
