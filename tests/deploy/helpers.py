"""Run the console as production runs it: subprocesses with a clean environment."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
# Settings the parent test process may carry that must not leak into "production".
_SCRUB = (
    "DEBUG",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "DATABASE_URL",
    "REDIS_URL",
    "LOG_FORMAT",
    "STATIC_ROOT",
    "METRICS_TOKEN",
    "PROMETHEUS_MULTIPROC_DIR",
    "SECURE_SSL_REDIRECT",
    "PYTEST_CURRENT_TEST",
    # Set by the browser tests in this process; `check --deploy` rightly refuses it.
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "ATTACHMENTS_STORAGE",
    "AWS_STORAGE_BUCKET_NAME",
    "AWS_S3_ENDPOINT_URL",
    "AWS_S3_REGION_NAME",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
)


def production_env(**overrides) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "paperclip_console.settings",
            "DEBUG": "0",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "console.example.com,127.0.0.1",
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/postgres",
            "PYTHONUNBUFFERED": "1",
        }
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def manage(*args, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextmanager
def gunicorn(env: dict, log: Path, *, start_timeout: float) -> Iterator[str]:
    """gunicorn as production starts it (deploy/gunicorn.conf.py), its output in
    `log`; yields the address it listens on, stops it (SIGTERM) afterwards."""
    with log.open("w") as out:
        server = subprocess.Popen(
            [PYTHON, "-m", "gunicorn", "-c", "deploy/gunicorn.conf.py"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = None
        deadline = time.monotonic() + start_timeout
        while url is None and time.monotonic() < deadline:
            assert server.poll() is None, log.read_text()
            found = re.search(r"Listening at: (http://127\.0\.0\.1:\d+)", log.read_text())
            url = found.group(1) if found else None
            time.sleep(0.1)
        assert url, log.read_text()
        yield url
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
