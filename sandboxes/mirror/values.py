"""Reading one value of a Paperclip row — a uuid, a choice, a time, a JSON
object, text — or refusing the row with `Malformed` (docs/architecture.md, Mirror)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, overload
from uuid import UUID

from django.db.models import TextChoices
from django.utils.dateparse import parse_datetime

# Deterministic ids for rows the mirror derives, so re-mirroring is idempotent.
MIRROR_NAMESPACE = UUID("5f1c1d0e-7c2a-4a55-9a3e-1f6b0c9d2e47")


class Malformed(ValueError):
    """The row cannot be mirrored as it is. `reason` names the row's problem;
    `kind` groups like problems in the summary line."""

    def __init__(self, reason: str, kind: str | None = None):
        super().__init__(reason)
        self.kind = kind or reason


class NotASandbox(Exception):
    """A readable lease row that names no sandbox (Paperclip writes local and
    ssh leases, and failed acquires, with no provider_lease_id): nothing at a
    provider to keep or retire. Counted apart, never as skipped, so that
    "skipped" means only rows the mirror could not read (docs/architecture.md, Mirror)."""


@overload
def _uuid(value: object, what: str, *, required: Literal[True]) -> UUID: ...
@overload
def _uuid(value: object, what: str, *, required: bool = False) -> UUID | None: ...
def _uuid(value: object, what: str, *, required: bool = False) -> UUID | None:
    if value is None or value == "":
        if required:
            raise Malformed(f"{what} is missing")
        return None
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise Malformed(f"{what} is not a uuid: {value!r}", f"{what} is not a uuid") from None


_VALUES: dict[type, frozenset] = {}


@overload
def _choice(
    value: object, choices: type[TextChoices], what: str, *, nullable: Literal[False] = False
) -> str: ...
@overload
def _choice(
    value: object, choices: type[TextChoices], what: str, *, nullable: bool
) -> str | None: ...
def _choice(value, choices: type[TextChoices], what: str, *, nullable: bool = False) -> str | None:
    if value is None and nullable:
        return None
    allowed = _VALUES.get(choices)
    if allowed is None:  # Django rebuilds .values on every access
        allowed = _VALUES[choices] = frozenset(choices.values)
    if value not in allowed:
        # Named, so an operator sees which value a newer Paperclip added.
        raise Malformed(f"unknown {what} {value!r}")
    return value


def _when(value, what: str) -> datetime | None:
    if value is None:
        return None
    parsed: datetime | None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = parse_datetime(value)
        except ValueError:
            parsed = None
    else:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise Malformed(f"{what} is not an RFC 3339 timestamp: {value!r}", f"{what} is not a time")
    return parsed


def _json_object(value, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"{what} is not a JSON object")
    return value


def _text(value, limit: int) -> str:
    return "" if value is None else str(value)[:limit]
