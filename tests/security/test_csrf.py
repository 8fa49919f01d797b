"""CSRF on every console action: only the token of this browser's own, current
cookie works; tampered, foreign, pre-login and cookie-less tokens are refused
and change nothing."""

import re

import pytest
from django.conf import settings
from django.urls import reverse

from sandboxes.models import AuditEvent

from .conftest import PASSWORD, client_for, snapshot
from .endpoints import ACTIONS

pytestmark = pytest.mark.django_db

TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def page_token(client, url=None) -> str:
    response = client.get(url or reverse("environments"))
    assert response.status_code == 200
    return TOKEN.search(response.content.decode()).group(1)


def tamper(token: str) -> str:
    i = len(token) // 2
    return token[:i] + ("a" if token[i] != "a" else "b") + token[i + 1 :]


def _post(client, action, world, token=None, header=False):
    data = action.data(world)
    extra = {}
    if token is not None and header:
        extra["HTTP_X_CSRFTOKEN"] = token
    elif token is not None:
        data = {**data, "csrfmiddlewaretoken": token}
    return client.post(action.url(world), data, **extra)


def _refused(client, action, world, **kwargs):
    before = snapshot(*filter(None, [action.row(world)]))
    response = _post(client, action, world, **kwargs)
    assert response.status_code == 403, response.content[:200]
    assert b"CSRF" in response.content
    assert snapshot(*filter(None, [action.row(world)])) == before


@pytest.fixture
def browser(users):
    return client_for(users["admin"], csrf=True)


by_name = pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.name)


@by_name
@pytest.mark.parametrize("header", [False, True], ids=["form", "htmx-header"])
def test_a_valid_token_is_accepted(browser, world, action, header):
    token = page_token(browser)
    response = _post(browser, action, world, token=token, header=header)
    assert response.status_code in (200, 302)
    assert AuditEvent.objects.filter(action=action.audit).count() == 1


@by_name
def test_a_post_without_a_token_is_refused(browser, world, action):
    page_token(browser)
    _refused(browser, action, world)


@by_name
@pytest.mark.parametrize("header", [False, True], ids=["form", "htmx-header"])
def test_a_tampered_token_is_refused(browser, world, action, header):
    _refused(browser, action, world, token=tamper(page_token(browser)), header=header)


@by_name
def test_a_token_from_another_session_is_refused(browser, users, world, action):
    page_token(browser)
    other = client_for(users["operator"], csrf=True)
    _refused(browser, action, world, token=page_token(other))


@by_name
def test_a_token_without_its_cookie_is_refused(browser, world, action):
    token = page_token(browser)
    del browser.cookies[settings.CSRF_COOKIE_NAME]
    _refused(browser, action, world, token=token)


@by_name
def test_a_token_from_before_login_is_refused_after_it(users, world, action):
    """Login rotates the CSRF secret, so a token planted or read before login
    (login CSRF, a shared machine) is dead once the user signs in."""
    browser = client_for(csrf=True)
    old = page_token(browser, reverse("login"))
    response = browser.post(
        reverse("login"),
        {"username": users["admin"].username, "password": PASSWORD, "csrfmiddlewaretoken": old},
    )
    assert response.status_code == 302
    _refused(browser, action, world, token=old)
    # The fresh token works: the refusal was the replay, not the session.
    assert _post(browser, action, world, token=page_token(browser)).status_code in (200, 302)


def test_a_token_from_a_logged_out_session_is_refused_after_the_next_login(users, world):
    action = ACTIONS[1]  # retry: succeeds any number of times
    browser = client_for(csrf=True)
    token = page_token(browser, reverse("login"))
    login = {"username": users["admin"].username, "password": PASSWORD}
    browser.post(reverse("login"), {**login, "csrfmiddlewaretoken": token})
    replay = page_token(browser)
    browser.post(reverse("logout"), {"csrfmiddlewaretoken": replay})
    token = page_token(browser, reverse("login"))
    browser.post(reverse("login"), {**login, "csrfmiddlewaretoken": token})
    _refused(browser, action, world, token=replay)


def test_login_itself_needs_a_token(users):
    browser = client_for(csrf=True)
    page_token(browser, reverse("login"))
    response = browser.post(
        reverse("login"), {"username": users["admin"].username, "password": PASSWORD}
    )
    assert response.status_code == 403
    assert "_auth_user_id" not in browser.session
