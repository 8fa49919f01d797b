"""Structured logs: a JSON formatter and the pass / lease / attempt context it carries.

Code that works on a pass, a lease or a claim wraps the work in
`log_context(pass_id=..., lease_id=..., attempt_id=...)`; every record logged
inside (in this thread or task) carries those ids, in JSON and plain text alike.
Contexts nest: an inner one adds to or overrides the outer one's ids.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

CONTEXT_KEYS = ("pass_id", "lease_id", "attempt_id")

_context: ContextVar[dict[str, str] | None] = ContextVar("console_log_context", default=None)


def current_context() -> dict[str, str]:
    return dict(_context.get() or {})


@contextmanager
def log_context(**ids) -> Iterator[dict[str, str]]:
    """Attach ids (pass_id, lease_id, attempt_id) to every log record inside the block.

    None values are ignored, so callers can pass what they have.
    """
    unknown = set(ids) - set(CONTEXT_KEYS)
    if unknown:
        raise TypeError(f"unknown log context keys: {sorted(unknown)}")
    merged = {**current_context(), **{k: str(v) for k, v in ids.items() if v is not None}}
    token = _context.set(merged)
    try:
        yield merged
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    """Copies the current log context onto each record (as attributes), so any
    formatter can use them; a record's own `extra={...}` ids win."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in current_context().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the context ids
    when set, and exc_info as a string when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = current_context()
        for key in CONTEXT_KEYS:
            value = getattr(record, key, None) or context.get(key)
            if value is not None:
                entry[key] = str(value)
        if record.exc_info:
            entry["exc_info"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.exc_text:
            entry["exc_info"] = record.exc_text
        if record.stack_info:
            entry["stack_info"] = record.stack_info
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Plain text for development, with the context ids appended when set."""

    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = current_context()
        ids = []
        for key in CONTEXT_KEYS:
            value = getattr(record, key, None) or context.get(key)
            if value is not None:
                ids.append(f"{key}={value}")
        if ids:
            first, newline, rest = line.partition("\n")
            line = f"{first} [{' '.join(ids)}]{newline}{rest}"
        return line
