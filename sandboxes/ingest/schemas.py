"""Payload schemas for every ingest event type, and batch validation that
names every bad field as (index, path, message)."""

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, Union, get_args
from uuid import UUID

from django.utils import timezone
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
)
from pydantic_core import PydanticCustomError

from sandboxes.models.choices import (
    CleanupStatus,
    Disposition,
    EnvironmentDriver,
    ExportState,
    IntentKind,
    IntentState,
    IssueStatus,
    LeasePolicy,
    LeaseStatus,
    ProviderName,
    RecoveryStatus,
    RetirementMode,
    RunStatus,
    SaveState,
    TerminationState,
)


def _require_str(value: Any) -> Any:
    # Without this pydantic would accept a unix timestamp or a UUID object;
    # the wire format is RFC 3339 and uuid strings.
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _require_rfc3339(value: Any) -> Any:
    # pydantic would also read a string of digits ("0000...") as a unix time.
    _require_str(value)
    if len(value) > 64 or not _RFC3339.match(value):
        raise ValueError("must be an RFC 3339 timestamp")
    return value


Uuid = Annotated[UUID, BeforeValidator(_require_str)]
Timestamp = Annotated[AwareDatetime, BeforeValidator(_require_rfc3339)]
Text200 = Annotated[str, Field(min_length=1, max_length=200)]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


# An event may be dated at most this far ahead of the server's clock: a row's
# newest source time wins every later update, so a year-9999 event would freeze
# it (docs/architecture.md, how a lease travels).
MAX_CLOCK_SKEW = timedelta(minutes=5)
# Deeper JSON is refused before anything walks it (Python recursion, jsonb).
MAX_JSON_DEPTH = 64


def sandbox_root(value: str) -> str:
    """A workspace root inside a sandbox (docs/architecture.md, the rooms): relative to the sandbox
    home, or absolute under a home directory (/home/<user>/...); never `..`,
    never the filesystem root or the home itself."""
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if ".." in value.split("/"):
        raise ValueError("must not contain '..'")
    if not parts:
        raise ValueError("must name a directory under the sandbox home")
    if value.startswith("/") and (len(parts) < 3 or parts[0] != "home"):
        raise ValueError("an absolute root must lie under the sandbox home (/home/<user>/...)")
    return value


def provider_id(value: str) -> str:
    """A provider's sandbox id is one URL path segment: `/` would make it name
    another endpoint, and `.` / `..` are rewritten away by every URL library."""
    if value in (".", ".."):
        raise ValueError(f"{value!r} is not a sandbox id")
    if "/" in value:
        raise ValueError("a sandbox id is one path segment: it cannot contain '/'")
    return value


def any_sandbox_id(value: str) -> str:
    """A sandbox id of any provider: an SSH lease's is `ssh://host/path`
    (paperclipai/paperclip environment_leases.provider_lease_id is free text),
    which the console's URLs carry percent-encoded. No segment may be `.` or
    `..`, which URL and path libraries rewrite into another place."""
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"{value!r} is not a sandbox id: it has a '.' or '..' segment")
    return value


# Providers the console drives (a set: this is checked for every lease event).
_DRIVEN = frozenset(ProviderName.values)

SandboxId = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(any_sandbox_id)]

# Paperclip's provider key: daytona, local, ssh, e2b, a plugin key…
# (docs/architecture.md, the rooms: every provider is mirrored; the console
# drives only ProviderName's).
ProviderKey = Annotated[
    str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]*$")
]


class Data(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ManifestEntry(Data):
    sha256: Sha256
    size: Annotated[StrictInt, Field(ge=0)]


class EnvironmentUpserted(Data):
    environment_id: Uuid
    name: Text200
    provider: ProviderKey
    driver: EnvironmentDriver | None = None
    retirement_mode: RetirementMode | None = None
    warm_retention_hours: Annotated[float, Field(ge=0, le=24 * 365, strict=False)] | None = None
    max_retirements_per_pass: Annotated[StrictInt, Field(ge=0, le=10_000)] | None = None
    workspace_root: (
        Annotated[str, Field(min_length=1, max_length=500), AfterValidator(sandbox_root)] | None
    ) = None


class IssueUpserted(Data):
    issue_id: Uuid
    key: Annotated[str, Field(max_length=64)] | None = None
    title: Annotated[str, Field(max_length=500)] | None = None
    status: IssueStatus
    bound_workspace_id: Uuid | None = None


class WorkspaceUpserted(Data):
    workspace_id: Uuid
    issue_id: Uuid
    save_state: SaveState
    saved_at: Timestamp | None = None
    final_checkpoint_at: Timestamp | None = None
    saved_manifest: (
        dict[Annotated[str, Field(min_length=1, max_length=1000)], ManifestEntry] | None
    ) = None
    writer_run_id: Uuid | None = None


class RunUpserted(Data):
    run_id: Uuid
    issue_id: Uuid
    status: RunStatus
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None


def remote_cwd(value: str, info: ValidationInfo) -> str:
    """A lease's `metadata.remoteCwd`. For a provider the console drives it is
    the root the console hashes and exports files under, checked like
    `workspace_root` (`sandbox_root`). Another provider's sandbox is only stored
    and shown, and Paperclip runs it in any directory it was given (its SSH
    spec takes any non-empty remoteCwd, e.g. `/app`: paperclipai/paperclip
    packages/adapter-utils/src/ssh.ts): any path without a `..` segment.
    The lease's provider comes in the validation context; without one, the
    stricter rule."""
    provider = (info.context or {}).get("provider")
    if provider is None or provider in _DRIVEN:
        return sandbox_root(value)
    if ".." in value.split("/"):
        raise ValueError("must not contain '..'")
    return value


class LeaseMetadata(BaseModel):
    """A lease's free-form metadata; `remoteCwd` is the sandbox's workspace root
    when present (docs/architecture.md, the rooms), checked by `remote_cwd`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    remoteCwd: (
        Annotated[str, Field(min_length=1, max_length=500), AfterValidator(remote_cwd)] | None
    ) = None

    def as_json(self) -> dict:
        return self.model_dump(exclude_unset=True)


class LeaseUpserted(Data):
    lease_id: Uuid
    environment_id: Uuid
    provider: ProviderKey
    provider_lease_id: SandboxId
    status: LeaseStatus
    lease_policy: LeasePolicy
    acquired_at: Timestamp
    issue_id: Uuid | None = None
    workspace_id: Uuid | None = None
    run_id: Uuid | None = None
    released_at: Timestamp | None = None
    expires_at: Timestamp | None = None
    last_used_at: Timestamp | None = None
    failure_reason: Annotated[str, Field(max_length=200)] | None = None
    cleanup_status: CleanupStatus | None = None
    disposition: Disposition | None = None
    metadata: LeaseMetadata | None = None

    @field_validator("provider_lease_id")
    @classmethod
    def _one_segment_where_the_console_calls(cls, value, info: ValidationInfo):
        # A provider the console drives puts the id in a URL path (Daytona) or a
        # directory name (local): there it is one segment. Another provider's
        # id (an SSH sandbox's ssh://host/path) is only ever stored and shown.
        if info.data.get("provider") in _DRIVEN:
            return provider_id(value)
        return value


class LeaseReleased(Data):
    """Recorded as sent (docs/rules.md, candidate kinds); a missing status is
    derived from the disposition."""

    lease_id: Uuid
    disposition: Disposition
    status: LeaseStatus | None = None
    released_at: Timestamp | None = None


class ReceiptRecorded(Data):
    lease_id: Uuid
    kind: Literal["termination", "stop_and_retain"]
    state: TerminationState | None = Field(default=None, validate_default=True)
    run_id: Uuid
    # Must equal the lease's own sandbox id, checked when it is applied.
    provider_lease_id: SandboxId
    confirmed_at: Timestamp
    request_id: Text200 | None = None

    @field_validator("state")
    @classmethod
    def _termination_needs_state(cls, value, info: ValidationInfo):
        if value is None and info.data.get("kind") == "termination":
            raise PydanticCustomError("missing", "a termination receipt needs a state")
        return value


class IntentUpserted(Data):
    intent_id: Uuid
    lease_id: Uuid
    kind: IntentKind
    state: IntentState


class ExportUpserted(Data):
    export_id: Uuid
    lease_id: Uuid
    state: ExportState


class RecoveryActionUpserted(Data):
    action_id: Uuid
    issue_id: Uuid
    kind: Annotated[str, Field(min_length=1, max_length=64)]
    status: RecoveryStatus
    outcome: Annotated[str, Field(max_length=200)] | None = None
    lease_id: Uuid | None = None
    evidence: dict[str, Any] | None = None


EventType = Literal[
    "environment.upserted",
    "issue.upserted",
    "workspace.upserted",
    "run.upserted",
    "lease.upserted",
    "lease.released",
    "receipt.recorded",
    "intent.upserted",
    "export.upserted",
    "recovery_action.upserted",
]

EVENT_TYPES: dict[str, type[Data]] = {
    "environment.upserted": EnvironmentUpserted,
    "issue.upserted": IssueUpserted,
    "workspace.upserted": WorkspaceUpserted,
    "run.upserted": RunUpserted,
    "lease.upserted": LeaseUpserted,
    "lease.released": LeaseReleased,
    "receipt.recorded": ReceiptRecorded,
    "intent.upserted": IntentUpserted,
    "export.upserted": ExportUpserted,
    "recovery_action.upserted": RecoveryActionUpserted,
}


assert set(get_args(EventType)) == set(EVENT_TYPES), "one schema per event type"


class Envelope(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: Annotated[str, Field(min_length=1, max_length=200), BeforeValidator(_require_str)]
    type: EventType
    occurred_at: Timestamp
    data: dict[str, Any]


@dataclass(frozen=True)
class Event:
    index: int
    id: str
    type: str
    occurred_at: datetime
    data: Data


@dataclass(frozen=True)
class EventError:
    index: int | None
    path: str
    message: str

    def as_dict(self) -> dict:
        return {"index": self.index, "path": self.path, "message": self.message}


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


_FastManifestEntry: Any = _forbidding(ManifestEntry)
_FAST_TYPES: dict[str, type[BaseModel]] = {
    type_: _forbidding(schema) for type_, schema in EVENT_TYPES.items()
}
_FAST_TYPES["workspace.upserted"] = _forbidding(
    WorkspaceUpserted,
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
                "id": Envelope.model_fields["id"].rebuild_annotation(),
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
