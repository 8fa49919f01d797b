"""Production mode: refuses to start half-configured, passes `check --deploy`,
and serves the app and its static files through gunicorn and whitenoise."""

import json

import httpx
import pytest

from .helpers import ROOT, gunicorn, manage, production_env

# Every test here starts manage.py or gunicorn in a fresh process.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("SECRET_KEY", "SECRET_KEY is required when DEBUG is off"),
        ("ALLOWED_HOSTS", "ALLOWED_HOSTS is required when DEBUG is off"),
    ],
)
def test_it_refuses_to_start_without(missing, message):
    done = manage("check", env=production_env(**{missing: None}))
    assert done.returncode != 0
    assert message in done.stderr


def test_an_empty_allowed_hosts_is_missing_too():
    done = manage("check", env=production_env(ALLOWED_HOSTS=" , "))
    assert done.returncode != 0
    assert "ALLOWED_HOSTS is required" in done.stderr


def test_debug_needs_neither():
    done = manage("check", env=production_env(DEBUG="1", SECRET_KEY=None, ALLOWED_HOSTS=None))
    assert done.returncode == 0, done.stderr


def test_check_deploy_is_clean():
    done = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_check_deploy_flags_an_insecure_override():
    done = manage(
        "check", "--deploy", "--fail-level", "WARNING", env=production_env(SECURE_HSTS_SECONDS=0)
    )
    assert done.returncode != 0
    assert "security.W004" in done.stdout + done.stderr


@pytest.mark.django_db
def test_gunicorn_serves_the_console_and_whitenoise_its_static_files(tmp_path, settings):
    db = settings.DATABASES["default"]
    env = production_env(
        STATIC_ROOT=tmp_path / "static",
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        GUNICORN_BIND="127.0.0.1:0",
        WEB_CONCURRENCY=2,
    )
    done = manage("collectstatic", "--noinput", "-v", "0", env=env)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "static" / "staticfiles.json").read_text())["paths"]
    hashed = manifest["css/console.css"]
    assert hashed != "css/console.css"

    log = tmp_path / "gunicorn.log"
    with gunicorn(env, log, start_timeout=30) as url:
        # The TLS proxy in front tells the console the request was https.
        proxy = {"X-Forwarded-Proto": "https", "Host": "console.example.com"}
        with httpx.Client(base_url=url, headers=proxy, timeout=10) as http:
            plain = http.get("/accounts/login/", headers={"X-Forwarded-Proto": "http"})
            assert plain.status_code == 301
            assert plain.headers["location"].startswith("https://console.example.com/")

            login = http.get("/accounts/login/")
            assert login.status_code == 200
            assert f"/static/{hashed}" in login.text
            assert "Strict-Transport-Security" in login.headers
            assert login.headers["X-Frame-Options"] == "DENY"
            assert "secure" in login.headers["set-cookie"].lower()

            static = http.get(f"/static/{hashed}", headers={"Accept-Encoding": "gzip"})
            assert static.status_code == 200
            assert "immutable" in static.headers["cache-control"]
            assert static.headers.get("content-encoding") == "gzip"
            assert static.text == (ROOT / "static/css/console.css").read_text()

            assert http.get("/metrics").status_code == 401

            bad_host = http.get("/accounts/login/", headers={"Host": "evil.example.org"})
            assert bad_host.status_code == 400
        # Access and error logs are JSON lines.
        lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
        assert any(json.loads(line)["logger"] == "gunicorn.access" for line in lines)
