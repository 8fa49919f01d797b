"""Paperclip rows → console rows: pure functions over the source's dicts.

Each translator returns a `Row` (the console fields, the ids it references,
the receipts and intents its metadata holds) or raises `Malformed` with a
reason the mirror reports. A lease whose metadata cannot be read is still
mirrored (its status matters to other rows' holds) but *quarantined*: stored
as a placeholder, so the reconciler never judges it, and without receipts.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from django.utils.dateparse import parse_datetime

from sandboxes.models import (
    Environment,
    EnvironmentLease,
    ExecutionWorkspace,
    HeartbeatRun,
    Issue,
    RecoveryAction,
)
from sandboxes.models.choices import (
    RECEIPT_SCHEMAS,
    CleanupStatus,
    EnvironmentDriver,
    EnvironmentStatus,
    IntentKind,
    IntentState,
    IssueStatus,
    LeasePolicy,
    LeaseStatus,
    ProviderName,
    ReceiptKind,
    RecoveryStatus,
    RunStatus,
    SaveState,
    TerminationState,
)

# Deterministic ids for rows the mirror derives, so re-mirroring is idempotent.
MIRROR_NAMESPACE = UUID("5f1c1d0e-7c2a-4a55-9a3e-1f6b0c9d2e47")


class Malformed(ValueError):
    """The row cannot be mirrored as it is; the reason is reported."""


@dataclass
class Row:
    model: type
    pk: UUID
    fields: dict
    refs: dict[type, set[UUID]] = field(default_factory=dict)
    receipts: list[dict] = field(default_factory=list)
    intents: list[dict] = field(default_factory=list)
    quarantined: str = ""  # why, when the row is kept out of the reconciler's view

    def ref(self, model: type, pk: UUID | None) -> UUID | None:
        if pk is not None:
            self.refs.setdefault(model, set()).add(pk)
        return pk


# --- value readers ------------------------------------------------------------


def _uuid(value, what: str, *, required=False) -> UUID | None:
    if value is None or value == "":
        if required:
            raise Malformed(f"{what} is missing")
        return None
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise Malformed(f"{what} is not a uuid: {value!r}") from None


def _choice(value, choices, what: str, *, nullable=False) -> str | None:
    if value is None and nullable:
        return None
    if value not in choices.values:
        raise Malformed(f"unknown {what} {value!r}")
    return value


def _when(value, what: str) -> datetime | None:
    if value is None:
        return None
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
        raise Malformed(f"{what} is not an RFC 3339 timestamp: {value!r}")
    return parsed


def _json_object(value, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"{what} is not a JSON object")
    return value


def _text(value, limit: int) -> str:
    return "" if value is None else str(value)[:limit]


# --- tables -------------------------------------------------------------------


def environment(src: dict) -> Row:
    pk = _uuid(src.get("id"), "id", required=True)
    driver = _choice(src.get("driver"), EnvironmentDriver, "driver")
    config = _json_object(src.get("config"), "config")
    provider = config.get("provider") or (
        ProviderName.LOCAL if driver == EnvironmentDriver.LOCAL else ProviderName.DAYTONA
    )
    return Row(
        Environment,
        pk,
        {
            "name": _text(src.get("name"), 200) or f"environment {pk}",
            "driver": driver,
            "provider": _choice(provider, ProviderName, "provider"),
            "status": _choice(src.get("status"), EnvironmentStatus, "status"),
        },
    )


def issue(src: dict) -> Row:
    row = Row(Issue, _uuid(src.get("id"), "id", required=True), {})
    row.fields = {
        "key": _text(src.get("identifier"), 64),
        "title": _text(src.get("title"), 500),
        "status": _choice(src.get("status"), IssueStatus, "status"),
        "bound_workspace_id": row.ref(
            ExecutionWorkspace, _uuid(src.get("execution_workspace_id"), "execution_workspace_id")
        ),
    }
    return row


def execution_workspace(src: dict) -> Row:
    row = Row(ExecutionWorkspace, _uuid(src.get("id"), "id", required=True), {})
    metadata = _json_object(src.get("metadata"), "metadata")
    row.fields = {
        "issue_id": row.ref(Issue, _uuid(src.get("issue_id"), "issue_id")),
        "status": _text(src.get("status"), 32) or "active",
        "writer_run_id": row.ref(
            HeartbeatRun, _uuid(metadata.get("writerRunId"), "metadata.writerRunId")
        ),
    }
    return row


def heartbeat_run(src: dict) -> Row:
    row = Row(HeartbeatRun, _uuid(src.get("id"), "id", required=True), {})
    row.fields = {
        "issue_id": row.ref(Issue, _uuid(src.get("issue_id"), "issue_id")),
        "status": _choice(src.get("status"), RunStatus, "status"),
        "started_at": _when(src.get("started_at"), "started_at"),
        "finished_at": _when(src.get("finished_at"), "finished_at"),
    }
    return row


def environment_lease(src: dict) -> Row:
    pk = _uuid(src.get("id"), "id", required=True)
    row = Row(EnvironmentLease, pk, {})
    provider_lease_id = _text(src.get("provider_lease_id"), 200)
    row.fields = {
        "environment_id": row.ref(
            Environment, _uuid(src.get("environment_id"), "environment_id", required=True)
        ),
        "execution_workspace_id": row.ref(
            ExecutionWorkspace, _uuid(src.get("execution_workspace_id"), "execution_workspace_id")
        ),
        "issue_id": row.ref(Issue, _uuid(src.get("issue_id"), "issue_id")),
        "heartbeat_run_id": row.ref(
            HeartbeatRun, _uuid(src.get("heartbeat_run_id"), "heartbeat_run_id")
        ),
        "status": _choice(src.get("status"), LeaseStatus, "status"),
        "lease_policy": _choice(src.get("lease_policy"), LeasePolicy, "lease_policy"),
        "provider": _choice(src.get("provider"), ProviderName, "provider"),
        "provider_lease_id": provider_lease_id,
        "acquired_at": _when(src.get("acquired_at"), "acquired_at"),
        "last_used_at": _when(src.get("last_used_at"), "last_used_at"),
        "expires_at": _when(src.get("expires_at"), "expires_at"),
        "released_at": _when(src.get("released_at"), "released_at"),
        "failure_reason": _text(src.get("failure_reason"), 200),
        "cleanup_status": _choice(
            src.get("cleanup_status"), CleanupStatus, "cleanup_status", nullable=True
        ),
        "metadata": {},
    }
    metadata = src.get("metadata")
    try:
        metadata = _json_object(metadata, "metadata")
        receipts, intents, remote_cwd = lease_metadata(pk, provider_lease_id, metadata)
    except Malformed as exc:
        row.quarantined = str(exc)
        row.fields["metadata"] = metadata if isinstance(metadata, dict) else {"raw": metadata}
        return row
    row.fields["metadata"] = {**metadata, **({"remoteCwd": remote_cwd} if remote_cwd else {})}
    for receipt in receipts:
        row.ref(HeartbeatRun, receipt["run_id"])
    row.receipts, row.intents = receipts, intents
    return row


def recovery_action(src: dict) -> Row:
    row = Row(RecoveryAction, _uuid(src.get("id"), "id", required=True), {})
    evidence = _json_object(src.get("evidence"), "evidence")
    row.fields = {
        "source_issue_id": row.ref(
            Issue, _uuid(src.get("source_issue_id"), "source_issue_id", required=True)
        ),
        "kind": _text(src.get("kind"), 64),
        "status": _choice(src.get("status"), RecoveryStatus, "status"),
        "outcome": _text(src.get("outcome"), 200),
        "evidence": evidence,
        "lease_id": row.ref(EnvironmentLease, _uuid(evidence.get("leaseId"), "evidence.leaseId")),
    }
    return row


@dataclass(frozen=True)
class Save:
    """A work folder run's durable save, applied to the lease's workspace."""

    run_id: UUID
    lease_id: UUID
    state: str
    saved_at: datetime | None
    final_checkpoint_at: datetime | None
    manifest: dict | None  # path → {sha256, size}; None unless the save is committed


def work_folder_run(src: dict) -> Save:
    run_id = _uuid(src.get("run_id"), "run_id", required=True)
    manifest = _json_object(src.get("manifest"), "manifest")
    state = _choice(src.get("state"), SaveState, "state")
    files = None
    if state == SaveState.SAVED:
        files = {}
        for path, entry in _json_object(manifest.get("files"), "manifest.files").items():
            if (
                not isinstance(entry, dict)
                or not isinstance(entry.get("sha256"), str)
                or len(entry["sha256"]) != 64
                or not isinstance(entry.get("size"), int)
                or entry["size"] < 0
            ):
                raise Malformed(f"manifest.files[{path!r}] is not {{sha256, size}}")
            files[path] = {"sha256": entry["sha256"].lower(), "size": entry["size"]}
    return Save(
        run_id=run_id,
        lease_id=_uuid(manifest.get("leaseId"), "manifest.leaseId", required=True),
        state=state,
        saved_at=_when(src.get("last_saved_at"), "last_saved_at"),
        final_checkpoint_at=_when(manifest.get("finalCheckpointAt"), "manifest.finalCheckpointAt"),
        manifest=files,
    )


# --- lease metadata -------------------------------------------------------------

_RECEIPT_KEYS = {
    "remoteExecutionTermination": ReceiptKind.TERMINATION,
    "sandboxStopAndRetainReceipt": ReceiptKind.STOP_AND_RETAIN,
}
_INTENT_KEYS = {
    "sandboxStopAndRetain": IntentKind.STOP_AND_RETAIN,
    "nativeWorkspaceExportResume": IntentKind.EXPORT_RESUME,
}


def lease_metadata(
    lease_id: UUID, provider_lease_id: str, metadata: dict
) -> tuple[list[dict], list[dict], str]:
    """Receipts and intents held in a lease's metadata, and its remote cwd.

    Raises Malformed for a known key in an unknown or broken shape; keys the
    console does not use are left alone.
    """
    receipts = []
    for key, kind in _RECEIPT_KEYS.items():
        if metadata.get(key) is not None:
            receipts.append(_receipt(key, kind, lease_id, provider_lease_id, metadata[key]))
    intents = []
    for key, kind in _INTENT_KEYS.items():
        if metadata.get(key) is not None:
            intents.append(_intent(key, kind, lease_id, metadata[key]))
    replaced_by = metadata.get("reusableLeaseReplacedByRunId")
    _uuid(replaced_by, "reusableLeaseReplacedByRunId")
    _json_object(metadata.get("sandboxLeaseAcquisition"), "sandboxLeaseAcquisition")
    reusable = _json_object(metadata.get("reusableSandboxLease"), "reusableSandboxLease")
    remote_cwd = reusable.get("remoteCwd")
    if remote_cwd is not None and (not isinstance(remote_cwd, str) or not remote_cwd.strip()):
        raise Malformed("reusableSandboxLease.remoteCwd is not a path")
    return receipts, intents, remote_cwd or ""


def _receipt(key: str, kind: str, lease_id: UUID, provider_lease_id: str, value) -> dict:
    data = _json_object(value, key)
    schema = data.get("schema")
    if schema != RECEIPT_SCHEMAS[kind]:
        raise Malformed(f"{key} has unknown schema {schema!r}")
    state = data.get("state", TerminationState.STOPPED if kind != ReceiptKind.TERMINATION else None)
    state = _choice(state, TerminationState, f"{key}.state")
    if _uuid(data.get("leaseId"), f"{key}.leaseId", required=True) != lease_id:
        raise Malformed(f"{key} names another lease ({data.get('leaseId')})")
    if data.get("providerLeaseId") != provider_lease_id or not provider_lease_id:
        raise Malformed(f"{key} names another sandbox ({data.get('providerLeaseId')!r})")
    run_id = _uuid(data.get("runId"), f"{key}.runId")
    confirmed_at = _when(data.get("confirmedAt"), f"{key}.confirmedAt")
    if confirmed_at is None:
        raise Malformed(f"{key}.confirmedAt is missing: a queued request is not a receipt")
    request_id = data.get("requestId")
    if not isinstance(request_id, str) or not request_id.strip():
        basis = "|".join(
            str(x) for x in (kind, lease_id, run_id, provider_lease_id, state, data["confirmedAt"])
        )
        request_id = "mirror:" + hashlib.sha256(basis.encode()).hexdigest()[:40]
    return {
        "kind": kind,
        "lease_id": lease_id,
        "run_id": run_id,
        "provider_lease_id": provider_lease_id,
        "state": state,
        "schema": schema,
        "confirmed_at": confirmed_at,
        "request_id": request_id[:200],
        "payload": {**data, "source": "paperclip-mirror", "metadataKey": key},
    }


def _intent(key: str, kind: str, lease_id: UUID, value) -> dict:
    data = _json_object(value, key)
    state = _choice(data.get("state"), IntentState, f"{key}.state")
    request_id = data.get("requestId")
    if request_id is not None and not isinstance(request_id, str):
        raise Malformed(f"{key}.requestId is not a string")
    return {
        # One intent per lease and kind: a new request replaces the old one's state.
        "id": uuid.uuid5(MIRROR_NAMESPACE, f"intent:{lease_id}:{kind}"),
        "lease_id": lease_id,
        "kind": kind,
        "state": state,
        "request_id": (request_id or "")[:200],
    }
