"""Structured logs: one JSON object per line carrying pass, lease and attempt ids."""

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sandboxes.logging import ContextFilter, JsonFormatter, TextFormatter, log_context

ROOT = Path(__file__).resolve().parents[2]


def _record(message="hello %s", args=("world",), **extra):
    record = logging.LogRecord("sandboxes.test", logging.WARNING, __file__, 1, message, args, None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_it_writes_one_json_object_per_line():
    line = JsonFormatter().format(_record())
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "sandboxes.test"
    assert entry["message"] == "hello world"
    assert entry["time"].endswith("+00:00")
    assert "pass_id" not in entry and "lease_id" not in entry and "attempt_id" not in entry


def test_it_carries_the_context_ids():
    with log_context(pass_id="p-1"), log_context(lease_id="l-1", attempt_id=None):
        entry = json.loads(JsonFormatter().format(_record()))
    assert entry["pass_id"] == "p-1"
    assert entry["lease_id"] == "l-1"
    assert "attempt_id" not in entry
    # Outside the block the ids are gone again.
    assert "pass_id" not in json.loads(JsonFormatter().format(_record()))


def test_a_records_own_extra_ids_win():
    with log_context(lease_id="outer"):
        entry = json.loads(JsonFormatter().format(_record(lease_id="own")))
    assert entry["lease_id"] == "own"


def test_context_does_not_leak_between_threads():
    seen = {}

    def other():
        seen["entry"] = json.loads(JsonFormatter().format(_record()))

    with log_context(pass_id="main-thread"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert "pass_id" not in seen["entry"]


def test_it_rejects_unknown_context_keys():
    with pytest.raises(TypeError), log_context(sandbox="x"):
        pass


def test_exceptions_stay_on_one_line():
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        record = _record()
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exc_info"]


def test_the_filter_puts_ids_on_records_and_text_shows_them():
    record = _record()
    with log_context(pass_id="p-9", attempt_id="a-9"):
        ContextFilter().filter(record)
        line = TextFormatter().format(record)
    assert record.pass_id == "p-9"
    assert line.endswith("[pass_id=p-9 attempt_id=a-9]")


def _log_from_django(env_overrides: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "LOG_FORMAT", "SECRET_KEY")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "paperclip_console.settings",
            "SECRET_KEY": "x" * 60,
            "ALLOWED_HOSTS": "console.example.com",
            "DATABASE_URL": "sqlite:///:memory:",
            **env_overrides,
        }
    )
    code = (
        "import django, logging; django.setup();"
        "from sandboxes.logging import log_context\n"
        "with log_context(pass_id='p-42', lease_id='l-7', attempt_id='a-3'):\n"
        "    logging.getLogger('sandboxes.reconciler').warning('retired %s', 'sbx-1')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_production_logs_are_json_by_default():
    entry = json.loads(_log_from_django({"DEBUG": "0"}))
    assert entry["message"] == "retired sbx-1"
    assert entry["logger"] == "sandboxes.reconciler"
    assert (entry["pass_id"], entry["lease_id"], entry["attempt_id"]) == ("p-42", "l-7", "a-3")


@pytest.mark.slow
def test_debug_logs_are_text_unless_asked_for_json():
    line = _log_from_django({"DEBUG": "1"})
    assert "WARNING sandboxes.reconciler: retired sbx-1" in line
    assert "pass_id=p-42" in line
    assert json.loads(_log_from_django({"DEBUG": "1", "LOG_FORMAT": "json"}))["pass_id"] == "p-42"


@pytest.mark.slow
def test_an_unknown_log_format_refuses_to_start():
    env = {**os.environ, "DEBUG": "1", "LOG_FORMAT": "xml"}
    env["DJANGO_SETTINGS_MODULE"] = "paperclip_console.settings"
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "LOG_FORMAT must be json or text" in done.stderr
