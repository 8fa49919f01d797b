"""Ingest of Paperclip events (docs/architecture.md, how a lease travels):
validation, then an all-or-nothing apply."""

from .apply import BatchResult, apply_events
from .schemas import EventError, validate_batch

__all__ = ["BatchResult", "EventError", "apply_events", "validate_batch"]
