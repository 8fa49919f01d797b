"""Structured logs: a JSON formatter and the pass / lease / attempt context it carries.

Code that works on a pass, a lease or a claim wraps the work in
`log_context(pass_id=..., lease_id=..., attempt_id=...)`; every record logged
inside (in this thread or task) carries those ids, in JSON and plain text alike.
Contexts nest: an inner one adds to or overrides the outer one's ids.
"""

from __future__ import annotations

import json
import logging
import re
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


# Line breaks and other control characters a message may carry from a request
# (a path, a username, a provider's answer): in text logs they would forge
# lines that look like records of their own.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")


def escape_controls(text: str) -> str:
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class TextFormatter(logging.Formatter):
    """Plain text for development, with the context ids appended when set. One
    record is one line: newlines in the message are escaped (\\n), and a
    traceback follows indented, so nothing a caller logs can forge a record."""

    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.getMessage())
        record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        context = current_context()
        ids = []
        for key in CONTEXT_KEYS:
            value = getattr(record, key, None) or context.get(key)
            if value is not None:
                ids.append(f"{key}={escape_controls(str(value))}")
        if ids:
            line = f"{line} [{' '.join(ids)}]"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        blocks = [
            record.exc_text or "",
            self.formatStack(record.stack_info) if record.stack_info else "",
        ]
        for block in filter(None, blocks):
            line += "".join(f"\n    {escape_controls(part)}" for part in block.splitlines())
        return line
