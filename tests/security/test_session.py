"""Session cookies, session fixation, tokens at rest and the login limit."""

import json
import os
import subprocess
import sys
import warnings
from io import StringIO

import pytest
from django.conf import settings as django_settings
from django.core.cache.backends.base import CacheKeyWarning
from django.core.management import call_command
from django.db import connection
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st

from sandboxes.models import ApiToken, hash_token

from .conftest import FUZZ, PASSWORD, client_for

pytestmark = pytest.mark.django_db


def _login(client, username, password=PASSWORD, **extra):
    return client.post(reverse("login"), {"username": username, "password": password}, **extra)


# --- cookies and sessions ---------------------------------------------------------------


@pytest.mark.slow
def test_production_settings_mark_cookies_secure():
    """The flags DEBUG=off gives, read from the real settings module in a fresh process."""
    env = {
        **os.environ,
        "SECRET_KEY": "x" * 50,
        "ALLOWED_HOSTS": "console.example",
        "DJANGO_SETTINGS_MODULE": "paperclip_console.settings",
    }
    env.pop("DEBUG", None)
    code = (
        "import json; from django.conf import settings as s; print(json.dumps({k: getattr(s, k) "
        "for k in ['SESSION_COOKIE_SECURE', 'SESSION_COOKIE_HTTPONLY', 'SESSION_COOKIE_SAMESITE',"
        " 'CSRF_COOKIE_SECURE', 'SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS', 'DEBUG',"
        " 'X_FRAME_OPTIONS']}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    flags = json.loads(out.stdout)
    assert flags == {
        "SESSION_COOKIE_SECURE": True,
        "SESSION_COOKIE_HTTPONLY": True,
        "SESSION_COOKIE_SAMESITE": "Lax",
        "CSRF_COOKIE_SECURE": True,
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31536000,
        "DEBUG": False,
        "X_FRAME_OPTIONS": "DENY",
    }


def test_the_session_cookie_is_httponly_and_samesite(users):
    client = client_for()
    response = _login(client, users["operator"].username)
    cookie = response.cookies[django_settings.SESSION_COOKIE_NAME]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"


def test_login_issues_a_new_session_id(users):
    """Session fixation: a session id planted before login is not the one that signs in."""
    client = client_for()
    client.get(reverse("login"))
    client.session.save()
    planted = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    _login(client, users["operator"].username)
    assert client.cookies[django_settings.SESSION_COOKIE_NAME].value != planted


def test_logout_ends_the_session_on_the_server(users):
    client = client_for()
    _login(client, users["operator"].username)
    stolen = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    client.post(reverse("logout"))
    thief = client_for()
    thief.cookies[django_settings.SESSION_COOKIE_NAME] = stolen
    assert thief.get(reverse("dashboard")).status_code == 302


# --- tokens at rest ---------------------------------------------------------------------


def _tables_holding(text: str) -> list[str]:
    """Every table with a row whose text form contains `text`."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(
                f'SELECT 1 FROM "{table}" AS t WHERE strpos(t::text, %s) > 0 LIMIT 1', [text]
            )
            if cursor.fetchone():
                found.append(table)
    return found


def _check_stored_as_hash(raw: str):
    token = ApiToken.objects.get(token_hash=hash_token(raw))
    assert token.token_hash == hash_token(raw) != raw
    assert raw.startswith(token.prefix) and len(token.prefix) <= 12
    assert _tables_holding(raw[len(token.prefix) :]) == []


def test_a_token_made_in_the_console_is_stored_only_as_a_hash(users):
    response = client_for(users["admin"]).post(
        reverse("token-create"), {"name": "bot", "scope": "operator", "reason": "cron"}
    )
    raw = response.context["raw"]
    _check_stored_as_hash(raw)
    client_for().get("/api/v1/kept-sandboxes", HTTP_AUTHORIZATION=f"Bearer {raw}")
    _check_stored_as_hash(raw)  # using it stores nothing new either


def test_a_token_made_by_the_command_is_stored_only_as_a_hash():
    out = StringIO()
    call_command("create_token", "runtime", "--scope", "ingest", stdout=out)
    _check_stored_as_hash(out.getvalue().strip().splitlines()[-1])


# --- login limit ------------------------------------------------------------------------


def test_a_forged_forwarded_for_header_does_not_reset_the_limit(users):
    """From an address that is not a trusted proxy, X-Forwarded-For is ignored:
    the sender's own address is counted (20 free checks per address)."""
    client = client_for()
    untrusted = {"REMOTE_ADDR": "203.0.113.9"}
    for i in range(20):
        _login(client, f"guess{i}", "nope", HTTP_X_FORWARDED_FOR=f"10.0.0.{i}", **untrusted)
    response = _login(
        client, users["operator"].username, HTTP_X_FORWARDED_FOR="10.9.9.9", **untrusted
    )
    assert response.status_code == 429


@pytest.mark.parametrize("variant", ["{u}", "{U}", " {u} ", "{u}\t"])
def test_spelling_the_username_differently_shares_one_count(users, variant):
    username = users["operator"].username
    for i in range(5):
        _login(
            client_for(),
            variant.format(u=username, U=username.upper()),
            "nope",
            REMOTE_ADDR=f"10.0.1.{i}",
        )
    response = _login(client_for(), username, REMOTE_ADDR="10.0.2.1")
    assert response.status_code == 429
    assert "_auth_user_id" not in response.wsgi_request.session


texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=200)


@FUZZ
@given(username=st.one_of(texts, st.just("operator-sec")), password=texts, next_=texts)
def test_no_login_form_causes_a_500_or_signs_in_without_the_password(
    users, username, password, next_
):
    from django.core.cache import cache

    cache.clear()
    client = client_for()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheKeyWarning)  # keys must suit any cache backend
        response = client.post(
            reverse("login"), {"username": username, "password": password, "next": next_}
        )
    assert response.status_code in (200, 302)
    signed_in = "_auth_user_id" in client.session
    assert signed_in == (username == "operator-sec" and password == PASSWORD)
    if response.status_code == 302:
        location = response["Location"]
        assert not location.startswith("//") and "://" not in location  # no open redirect
