"""Batch validation that names every bad field as (index, path, message), and
the fast path that validates a whole body at once. The payload schemas of
each event type are `sandboxes/ingest/events.py`, importable from here too."""

import json
import math
import re
from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any, Literal, Union, cast, get_args
from uuid import UUID

from django.utils import timezone
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
)

from .events import (
    EVENT_TYPES,
    MAX_CLOCK_SKEW,
    MAX_JSON_DEPTH,
    AgentUpserted,
    CompanyUpserted,
    Data,
    Envelope,
    EnvironmentUpserted,
    Event,
    EventError,
    EventType,
    ExportUpserted,
    IntentUpserted,
    IssueUpserted,
    LeaseMetadata,
    LeaseReleased,
    LeaseUpserted,
    ManifestEntry,
    ProviderKey,
    ReceiptRecorded,
    RecoveryActionUpserted,
    RunUpserted,
    SandboxId,
    Sha256,
    Text200,
    Timestamp,
    UserId,
    UserUpserted,
    Uuid,
    WorkspaceUpserted,
    any_sandbox_id,
    provider_id,
    remote_cwd,
    sandbox_root,
)

# The event schemas (`sandboxes/ingest/events.py`), importable from here as before.
__all__ = [
    "AgentUpserted",
    "CompanyUpserted",
    "EnvironmentUpserted",
    "EventType",
    "ExportUpserted",
    "IntentUpserted",
    "IssueUpserted",
    "LeaseMetadata",
    "LeaseReleased",
    "LeaseUpserted",
    "ProviderKey",
    "ReceiptRecorded",
    "RecoveryActionUpserted",
    "RunUpserted",
    "SandboxId",
    "Sha256",
    "Text200",
    "UserId",
    "UserUpserted",
    "Uuid",
    "any_sandbox_id",
    "provider_id",
    "remote_cwd",
    "sandbox_root",
]


def _errors(index: int, prefix: tuple, exc: ValidationError) -> list[EventError]:
    out = []
    for err in exc.errors(include_url=False):
        loc = prefix + tuple(err["loc"])
        path = ".".join(str(part) for part in loc) or "(event)"
        message = err["msg"].removeprefix("Value error, ")
        out.append(EventError(index, path, message))
    return out


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a JSON number")
    return value


class TooDeep(ValueError):
    """JSON nested deeper than MAX_JSON_DEPTH; `path` names where."""

    def __init__(self, path: str, limit: int):
        super().__init__(f"nested deeper than {limit} levels at {path}")
        self.path = path


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """The path of the first place `value` nests deeper than `limit`, else None.
    Iterative, so a hostile document cannot exhaust the stack while measured."""
    stack = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if not isinstance(item, dict | list):
            continue
        if depth >= limit:
            return path or "(body)"
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in pairs:
            if isinstance(child, dict | list):
                step = f"{path}[{key}]" if isinstance(item, list) else f"{path}.{key}"
                stack.append((child, step.lstrip("."), depth + 1))
    return None


def decode_json(raw: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """json.loads without Python's extensions: NaN, Infinity and numbers that
    overflow to infinity are refused (jsonb cannot store them), and so is JSON
    nested deeper than `max_depth` (TooDeep, a ValueError naming the path)."""
    try:
        value = json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise TooDeep("(body)", max_depth) from None
    path = too_deep(value, max_depth)
    if path is not None:
        raise TooDeep(path, max_depth)
    return value


_ESCAPED_UNSTORABLE = re.compile(rb"\\u0000|\\u[dD][89a-fA-F]")


def may_hold_unstorable_text(raw: bytes | str) -> bool:
    """In JSON text NUL and surrogates can only arrive as \\u escapes, so a body
    without them needs no walk through every string (a fast path for ingest)."""
    data = raw.encode() if isinstance(raw, str) else raw
    return _ESCAPED_UNSTORABLE.search(data) is not None


def _unstorable_paths(value: Any, path: str = ""):
    """Paths of keys or strings PostgreSQL cannot store: JSON allows NUL and lone
    surrogates, text and jsonb columns don't, so they must be a 400, not a 500."""
    if isinstance(value, str):
        if _unstorable(value):
            yield path or "(event)"
    elif isinstance(value, dict):
        for key, item in value.items():
            step = f"{path}.{key}" if path else str(key)
            if _unstorable(str(key)):
                yield step
            else:
                yield from _unstorable_paths(item, step)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _unstorable_paths(item, f"{path}[{i}]")


def _unstorable(text: str) -> bool:
    if "\x00" in text:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def validate_batch(
    payload: Any, *, max_events: int, check_text: bool = True, now: datetime | None = None
) -> tuple[list[Event], list[EventError]]:
    """Validate a decoded request body. Returns the events, or every error.

    `check_text=False` skips the search for text PostgreSQL cannot store, for
    callers that know from the raw JSON (`may_hold_unstorable_text`) there is none.
    `now` is the server's clock, against which future-dated events are refused.
    """
    latest = (now or timezone.now()) + MAX_CLOCK_SKEW
    if not isinstance(payload, dict) or "events" not in payload:
        return [], [EventError(None, "events", "body must be an object with an 'events' list")]
    raw_events = payload["events"]
    if not isinstance(raw_events, list):
        return [], [EventError(None, "events", "must be a list")]
    if len(raw_events) > max_events:
        return [], [EventError(None, "events", f"at most {max_events} events per batch")]

    events: list[Event] = []
    errors: list[EventError] = []
    for index, raw in enumerate(raw_events):
        unstorable = list(_unstorable_paths(raw)) if check_text else []
        if unstorable:
            message = "text cannot contain NUL (\\u0000) or lone surrogates"
            errors.extend(EventError(index, path, message) for path in unstorable)
            continue
        try:
            envelope = Envelope.model_validate(raw)
        except ValidationError as exc:
            errors.extend(_errors(index, (), exc))
            continue
        future = envelope.occurred_at > latest
        if future:
            errors.append(
                EventError(
                    index,
                    "occurred_at",
                    f"{envelope.occurred_at.isoformat()} is more than "
                    f"{MAX_CLOCK_SKEW.total_seconds() / 60:g} minutes ahead of the server's "
                    "clock; a future-dated event would win every later update",
                )
            )
        try:
            # A lease's provider decides how its metadata is checked (`remote_cwd`).
            context = {"provider": envelope.data.get("provider")}
            data = EVENT_TYPES[envelope.type].model_validate(envelope.data, context=context)
        except ValidationError as exc:
            errors.extend(_errors(index, ("data",), exc))
            continue
        if future:
            continue
        events.append(Event(index, envelope.id, envelope.type, envelope.occurred_at, data))
    return events, errors


# --- The fast path: a whole batch in one pydantic call, straight from the bytes.
#
# Every object of the body must land in a typed field (`extra="forbid"`, no NaN
# or infinity) or in a free-form value checked here afterwards, so a body the
# fast path accepts is one `decode_json` + `validate_batch` accept with the same
# values. Anything it refuses is validated again by `validate_batch`, whose
# error messages are the contract: the fast path only ever answers "accepted".
# Its rules may be stricter (a lease's remoteCwd is checked as a driven
# provider's; a NaN or a deep value anywhere refuses), never looser.

_FAST = ConfigDict(extra="forbid", allow_inf_nan=False)


def _forbidding(schema: type[BaseModel], **fields: Any) -> type[BaseModel]:
    """`schema` refusing unknown keys, with some fields' types replaced."""
    namespace: dict[str, Any] = {
        "model_config": _FAST,
        "__module__": __name__,
        "__qualname__": f"Fast{schema.__name__}",
        "__annotations__": {name: hint for name, (hint, _) in fields.items()},
    }
    namespace.update({name: default for name, (_, default) in fields.items()})
    return type(f"Fast{schema.__name__}", (schema,), namespace)


# An id on the fast path is a string in the canonical spelling (what
# `str(uuid.UUID(...))` gives), and stays one: the fold keys rows by it, and no
# uuid.UUID object is built per id (in the validation and in every dict lookup
# of the fold, they were most of the fast path's Python time). Any other
# spelling the detailed path's UUID takes (upper case, braces, no dashes) goes
# there, and `plain_ids` brings its ids to this form.
CANONICAL_UUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_FastUuid = Annotated[str, Field(pattern=CANONICAL_UUID)]


def _is_uuid(annotation: Any) -> bool:
    """`Uuid` or `Uuid | None`."""
    if annotation is UUID:
        return True
    members = [a for a in get_args(annotation) if a is not type(None)]
    return len(members) == 1 and UUID in (members[0], *get_args(members[0]))


# The id fields of each event schema.
ID_FIELDS: dict[type, tuple[str, ...]] = {
    schema: tuple(name for name, f in schema.model_fields.items() if _is_uuid(f.annotation))
    for schema in EVENT_TYPES.values()
}


def _fast_ids(schema: type[BaseModel]) -> dict[str, Any]:
    return {
        name: (_FastUuid, ...) if field.is_required() else (_FastUuid | None, field.default)
        for name, field in schema.model_fields.items()
        if name in ID_FIELDS[schema]
    }


_FastManifestEntry: Any = _forbidding(ManifestEntry)
_FAST_TYPES: dict[str, type[BaseModel]] = {
    type_: _forbidding(schema, **_fast_ids(schema)) for type_, schema in EVENT_TYPES.items()
}
_FAST_TYPES["workspace.upserted"] = _forbidding(
    WorkspaceUpserted,
    **_fast_ids(WorkspaceUpserted),
    saved_manifest=(
        dict[Annotated[str, Field(min_length=1, max_length=1000)], _FastManifestEntry] | None,
        None,
    ),
)
# What each fast schema stands for (apply looks schemas up by type).
SCHEMA_OF: dict[type, type[Data]] = {
    **{schema: schema for schema in EVENT_TYPES.values()},
    **{_FAST_TYPES[t]: EVENT_TYPES[t] for t in EVENT_TYPES},
}


def _envelope(type_: str) -> type[BaseModel]:
    return type(
        f"Fast{EVENT_TYPES[type_].__name__}Event",
        (BaseModel,),
        {
            "model_config": _FAST,
            "__module__": __name__,
            "__annotations__": {
                # From JSON a str field takes only a string: `_require_str`,
                # the detailed path's check, would only check it again.
                "id": Annotated[str, Field(min_length=1, max_length=200)],
                "type": Literal.__getitem__(type_),
                "occurred_at": Timestamp,
                "data": _FAST_TYPES[type_],
            },
        },
    )


# One event, its schema picked by its type (a tagged union: one schema tried).
_FastEvent: Any = Annotated[
    Union.__getitem__(tuple(_envelope(t) for t in EVENT_TYPES)),
    Field(discriminator="type"),
]
_FAST_BODY: TypeAdapter[Any] = TypeAdapter(
    create_model("FastBody", __config__=_FAST, events=(list[_FastEvent], ...))
)
_FAST_EVENT: TypeAdapter[Any] = TypeAdapter(_FastEvent)
# A free-form value sits this deep in the body (body, events, event, data, field).
_FREE_DEPTH = MAX_JSON_DEPTH - 5


def _plain(value: Any) -> bool:
    """A free-form value `decode_json` would have accepted where it sits."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return too_deep(value, _FREE_DEPTH) is None


def _fast_events(parsed: list[Any], now: datetime | None) -> list[Event] | None:
    latest = (now or timezone.now()) + MAX_CLOCK_SKEW
    events = []
    for index, envelope in enumerate(parsed):
        if envelope.occurred_at > latest:
            return None
        data = envelope.data
        fields = data.__dict__
        free = fields.get("evidence")
        metadata = fields.get("metadata")
        if free is not None and not _plain(free):
            return None
        if metadata is not None and metadata.model_extra and not _plain(metadata.model_extra):
            return None
        events.append(Event(index, envelope.id, envelope.type, envelope.occurred_at, data))
    return events


_FAST_OF: dict[type, type[BaseModel]] = {
    schema: _FAST_TYPES[t] for t, schema in EVENT_TYPES.items()
}


def plain_ids(events: list[Event]) -> list[Event]:
    """The events as the fold takes them, whichever path validated them: ids as
    canonical strings, in the fast schemas' classes (`SCHEMA_OF` names the
    schema each stands for). Events of the fast path are returned as they are."""
    out = []
    for event in events:
        data = event.data
        schema = type(data)
        if schema in _FAST_OF:
            values = dict(data.__dict__)
            for name in ID_FIELDS[schema]:
                if values[name] is not None:
                    values[name] = str(values[name])
            plain = _FAST_OF[schema].model_construct(set(data.model_fields_set), **values)
            event = replace(event, data=cast(Data, plain))
        out.append(event)
    return out


def fast_validate_body(
    raw: bytes | str, *, max_events: int, now: datetime | None = None
) -> list[Event] | None:
    """A whole request body validated in one call: its events, or None when
    anything is amiss (the caller then runs `decode_json` + `validate_batch`
    for the answer)."""
    if may_hold_unstorable_text(raw):
        return None
    try:
        body = _FAST_BODY.validate_json(raw)
    except ValidationError:
        return None
    if len(body.events) > max_events:
        return None
    return _fast_events(body.events, now)


def fast_validate_lines(lines: list[str], *, now: datetime | None = None) -> list[Event] | None:
    """The same for JSON lines, one event each (each line on its own: joined,
    two bad lines could make one good event)."""
    parsed = []
    for line in lines:
        if may_hold_unstorable_text(line):
            return None
        try:
            parsed.append(_FAST_EVENT.validate_json(line))
        except ValidationError:
            return None
    return _fast_events(parsed, now)
