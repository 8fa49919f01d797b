"""Headers and logs (issue 13, item 10): a Content-Security-Policy that needs
no inline code and no eval (htmx configured for it), a Permissions-Policy,
Cache-Control: no-store on console pages and API answers, and text logs in
which a newline cannot forge a record. The browser half is
tests/console/browser/test_csp.py."""

import logging
import re

import pytest
from django.urls import reverse

from sandboxes.logging import TextFormatter

from .conftest import client_for
from .endpoints import PAGES, page_url

pytestmark = pytest.mark.django_db


def _directives(header: str) -> dict[str, list[str]]:
    out = {}
    for part in header.split(";"):
        name, *values = part.split()
        out[name] = values
    return out


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_console_page_carries_the_headers(users, world, name):
    if PAGES[name] == "attachment":
        pytest.skip("needs a stored file")
    response = client_for(users["admin"]).get(page_url(name, world))
    assert response.status_code == 200
    csp = _directives(response["Content-Security-Policy"])
    assert csp["script-src"] == ["'self'"] and csp["style-src"] == ["'self'"]
    assert csp["object-src"] == ["'none'"] and csp["frame-ancestors"] == ["'none'"]
    assert "'unsafe-eval'" not in response["Content-Security-Policy"]
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]
    assert "camera=()" in response["Permissions-Policy"]
    assert "geolocation=()" in response["Permissions-Policy"]
    assert response["Cache-Control"] == "no-store"


@pytest.mark.parametrize("name", sorted(PAGES))
def test_no_console_page_needs_inline_code(users, world, name):
    """What the CSP would block: inline <script> or <style>, style="" and on…=""
    attributes, javascript: URLs, hx-on (htmx evaluates it)."""
    if name.startswith("audit-export") or PAGES[name] in ("attachment", "salvaged"):
        pytest.skip("not HTML")
    url = page_url(name, world)
    html = client_for(users["admin"]).get(url).content.decode()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline <script>"
    assert "<style" not in html
    assert not re.search(r"\sstyle=", html)
    assert not re.search(r"\son[a-z]+=", html)
    assert "javascript:" not in html and "hx-on" not in html
    assert not re.search(r"hx-trigger=\"[^\"]*\[", html), "trigger filters need eval"


def test_htmx_is_configured_without_eval(users):
    html = client_for(users["admin"]).get(reverse("dashboard")).content.decode()
    meta = re.search(r"<meta name=\"htmx-config\" content='([^']+)'>", html)
    assert meta, "htmx-config meta"
    assert '"allowEval": false' in meta[1] and '"includeIndicatorStyles": false' in meta[1]


def test_login_page_and_api_answers_are_not_stored(ingest_token):
    login = client_for().get(reverse("login"))
    assert login["Cache-Control"] == "no-store" and "Content-Security-Policy" in login
    api = client_for().get("/api/v1/kept-sandboxes", HTTP_AUTHORIZATION="Bearer nope")
    assert api["Cache-Control"] == "no-store"


def test_static_files_stay_cacheable(client):
    response = client.get("/static/css/console.css")
    assert response.status_code == 200
    assert response.get("Cache-Control") != "no-store"


# --- logs ----------------------------------------------------------------------------


def _record(message, *args, exc_info=None):
    return logging.LogRecord(
        "django.request", logging.WARNING, __file__, 1, message, args, exc_info
    )


def test_a_newline_in_a_text_log_cannot_forge_a_record():
    forged = "/accounts/login/\n2026-11-30 12:00:00,000 INFO sandboxes: admin approved everything"
    line = TextFormatter().format(_record("Not Found: %s", forged))
    assert "\n" not in line
    assert "\\n2026-11-30 12:00:00,000 INFO" in line
    assert "\r" not in TextFormatter().format(_record("a\rb\x1b[31mc\u2028d"))


def test_a_traceback_stays_under_its_record():
    try:
        raise ValueError("bad\nINFO forged line")
    except ValueError:
        import sys

        line = TextFormatter().format(_record("boom", exc_info=sys.exc_info()))
    first, *rest = line.split("\n")
    assert first.endswith("boom")
    assert rest and all(part.startswith("    ") for part in rest)
    assert any("bad\\nINFO forged line" in part for part in rest)
