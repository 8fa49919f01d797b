"""Payload schemas for every ingest event type: the per-event models, the
envelope, and the error an event's bad field is named by (`EventError`).
Batch validation is `sandboxes/ingest/schemas.py`."""

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, get_args
from uuid import UUID

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    ValidationInfo,
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
    if "." in value and any(part in (".", "..") for part in value.split("/")):
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


# Paperclip's company of the row (every Paperclip row names one); optional, as
# a client that sends none is judged without it (docs/rules.md, proof).
Company = Uuid | None


class ManifestEntry(Data):
    sha256: Sha256
    size: Annotated[StrictInt, Field(ge=0)]


class EnvironmentUpserted(Data):
    environment_id: Uuid
    company_id: Company = None
    name: Text200
    provider: ProviderKey
    driver: EnvironmentDriver | None = None
    retirement_mode: RetirementMode | None = None
    warm_retention_hours: Annotated[float, Field(ge=0, le=24 * 365, strict=False)] | None = None
    max_retirements_per_pass: Annotated[StrictInt, Field(ge=0, le=10_000)] | None = None
    workspace_root: (
        Annotated[str, Field(min_length=1, max_length=500), AfterValidator(sandbox_root)] | None
    ) = None


# A Paperclip user's id: better-auth's text id (paperclipai/paperclip
# packages/db/src/schema/auth.ts `user.id`), which issues name in
# assignee_user_id / created_by_user_id; not a uuid. No whitespace, so that it
# reads the same wherever the console shows it.
UserId = Annotated[
    str, Field(min_length=1, max_length=255, pattern=r"^\S+$"), BeforeValidator(_require_str)
]
# An address as Paperclip stores it (user.email, text NOT NULL): one @ between
# a local part and a domain, no spaces. Delivery is judged when a notice is sent.
Email = Annotated[str, Field(max_length=320, pattern=r"^[^@\s]+@[^@\s]+$")]
PersonName = Annotated[str, Field(max_length=200)]


class CompanyUpserted(Data):
    company_id: Uuid
    name: PersonName


class UserUpserted(Data):
    user_id: UserId
    name: PersonName
    email: Email


class AgentUpserted(Data):
    agent_id: Uuid
    company_id: Company = None
    name: PersonName


class IssueUpserted(Data):
    issue_id: Uuid
    company_id: Company = None
    key: Annotated[str, Field(max_length=64)] | None = None
    title: Annotated[str, Field(max_length=500)] | None = None
    status: IssueStatus
    bound_workspace_id: Uuid | None = None
    # Its people (docs/rules.md, the people around a sandbox).
    assignee_user_id: UserId | None = None
    assignee_agent_id: Uuid | None = None
    created_by_user_id: UserId | None = None


class WorkspaceUpserted(Data):
    workspace_id: Uuid
    company_id: Company = None
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
    company_id: Company = None
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
    company_id: Company = None
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
    """A provider's confirmation. The fields after request_id are those
    Paperclip's receipts carry for its proof (sandbox-stop-and-retain.ts
    settleStopOnlyCleanup: companyId, builtinProvider | pluginId, method). All
    optional: a receipt without one is recorded as sent, and the proof
    predicate says which condition it fails (docs/rules.md, proof)."""

    lease_id: Uuid
    kind: Literal["termination", "stop_and_retain"]
    state: TerminationState | None = Field(default=None, validate_default=True)
    run_id: Uuid
    # Must equal the lease's own sandbox id, checked when it is applied.
    provider_lease_id: SandboxId
    confirmed_at: Timestamp
    request_id: Text200 | None = None
    company_id: Company = None
    builtin_provider: Annotated[str, Field(max_length=64)] | None = None
    method: Annotated[str, Field(max_length=100)] | None = None
    plugin_id: Annotated[str, Field(max_length=200)] | None = None

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
    company_id: Company = None
    issue_id: Uuid
    kind: Annotated[str, Field(min_length=1, max_length=64)]
    status: RecoveryStatus
    outcome: Annotated[str, Field(max_length=200)] | None = None
    lease_id: Uuid | None = None
    evidence: dict[str, Any] | None = None


EventType = Literal[
    "company.upserted",
    "user.upserted",
    "agent.upserted",
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
    "company.upserted": CompanyUpserted,
    "user.upserted": UserUpserted,
    "agent.upserted": AgentUpserted,
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
