"""What a lease's metadata holds: Paperclip's termination and stop-and-retain
receipts, a pending stop-and-retain intent, an export in flight, the restore
source marker, and the remote working directory (docs/architecture.md,
Mirror). The keys and shapes are those Paperclip's writers use
(server/src/services/…)."""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from uuid import UUID

from sandboxes.models.choices import (
    RECEIPT_SCHEMAS,
    IntentKind,
    IntentState,
    ReceiptKind,
    TerminationState,
)

from .values import MIRROR_NAMESPACE, Malformed, _choice, _json_object, _uuid, _when

# Lease-metadata keys (server/src/services/…).
TERMINATION_KEY = "remoteExecutionTermination"  # remote-execution-termination.ts
STOP_RECEIPT_KEY = "sandboxStopAndRetainReceipt"  # sandbox-stop-and-retain.ts
STOP_INTENT_KEY = "sandboxStopAndRetain"  # sandbox-stop-and-retain.ts
EXPORT_RESUME_KEY = "nativeWorkspaceExportResume"  # native-workspace-export-resume.ts
ACQUISITION_KEY = "sandboxLeaseAcquisition"  # environment-runtime.ts
RESTORE_MARKER_KEY = "workspaceRestoreRecovery"  # legacy-workspace-restore-recovery.ts


@dataclass
class LeaseMetadata:
    receipts: list[dict]
    intents: list[dict]
    exports: list[dict]
    remote_cwd: str


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def intent_id(lease_id: UUID, kind: str) -> UUID:
    """One mirrored intent per lease and kind: a new request replaces the old."""
    return uuid.uuid5(MIRROR_NAMESPACE, f"intent:{lease_id}:{kind}")


def export_id(lease_id: UUID) -> UUID:
    return uuid.uuid5(MIRROR_NAMESPACE, f"export-resume:{lease_id}")


def lease_metadata(
    lease_id: UUID, provider_lease_id: str, metadata: dict, company_id: UUID | None = None
) -> LeaseMetadata:
    """Receipts, pending intents and exports held in a lease's metadata, and its
    remote cwd. Intents and exports are the lease's, so of its company; a
    receipt names its own. Raises Malformed for a known key in a broken shape;
    keys the console does not use are left alone."""
    receipts = []
    for key, kind in (
        (TERMINATION_KEY, ReceiptKind.TERMINATION),
        (STOP_RECEIPT_KEY, ReceiptKind.STOP_AND_RETAIN),
    ):
        value = metadata.get(key)
        if value is None:
            continue
        data = _json_object(value, key)
        if "schema" not in data and kind == ReceiptKind.TERMINATION:
            # Not a bound receipt (e.g. runtime-service data deletion writes
            # {state, providerLeaseId}): no proof of anything, not an error.
            continue
        receipts.append(_receipt(key, kind, lease_id, provider_lease_id, data))

    # legacy-workspace-restore-recovery.ts preserveLegacyWorkspaceRestoreSources:
    # {schema, runId} marks the lease a restore source. Kept verbatim in the
    # lease's metadata, where the listing reads it; only its shape is checked.
    if RESTORE_MARKER_KEY in metadata and not isinstance(metadata[RESTORE_MARKER_KEY], dict):
        raise Malformed(f"{RESTORE_MARKER_KEY} is not a JSON object")

    intents, exports = _pending(lease_id, metadata, company_id)
    acquisition = metadata.get(ACQUISITION_KEY)
    if acquisition is not None:
        _json_object(acquisition, ACQUISITION_KEY)
    remote_cwd = metadata.get("remoteCwd")
    if remote_cwd is None:
        reusable = _json_object(metadata.get("reusableSandboxLease"), "reusableSandboxLease")
        remote_cwd = reusable.get("remoteCwd")
    if remote_cwd is not None and (not isinstance(remote_cwd, str) or not remote_cwd.strip()):
        raise Malformed("remoteCwd is not a path")
    return LeaseMetadata(receipts, intents, exports, remote_cwd or "")


def _pending(lease_id: UUID, metadata: dict, company_id: UUID | None) -> tuple[list, list]:
    """The lease's pending stop-and-retain intent and export in flight, of its company."""
    # sandbox-stop-and-retain.ts: the key's presence is the pending stop
    # (hasStopOnlyCleanup uses hasOwnProperty; "invalid pins stay pending");
    # settling removes it. The intent has no state of its own.
    intents = []
    if STOP_INTENT_KEY in metadata:
        value = metadata[STOP_INTENT_KEY]
        request_id = value.get("requestId") if isinstance(value, dict) else None
        intents.append(
            {
                "id": intent_id(lease_id, IntentKind.STOP_AND_RETAIN),
                "company_id": company_id,
                "lease_id": lease_id,
                "kind": IntentKind.STOP_AND_RETAIN,
                "state": IntentState.PENDING,
                "request_id": request_id[:200] if isinstance(request_id, str) else "",
            }
        )
    # native-workspace-export-resume.ts: written before resuming a retained
    # sandbox to export its files; present = the export is in flight.
    exports = []
    if EXPORT_RESUME_KEY in metadata:
        exports.append(
            {
                "id": export_id(lease_id),
                "company_id": company_id,
                "lease_id": lease_id,
                "state": "pending",
            }
        )
    return intents, exports


def _receipt(key: str, kind: str, lease_id: UUID, provider_lease_id: str, data: dict) -> dict:
    """remote-execution-termination.ts remoteTerminationReceipt: {schema,
    companyId, runId, leaseId, provider, providerLeaseId, state, confirmedAt};
    sandbox-stop-and-retain.ts adds the stop-and-retain receipt {schema,
    requestId, companyId, runId, leaseId, provider, providerLeaseId,
    pluginId+method | builtinProvider+method, confirmedAt} (no state: a stop)."""
    schema = data.get("schema")
    if schema != RECEIPT_SCHEMAS[kind]:
        raise Malformed(f"{key} has unknown schema {schema!r}", f"{key} has an unknown schema")
    state = data.get("state", TerminationState.STOPPED if kind != ReceiptKind.TERMINATION else None)
    state = _choice(state, TerminationState, f"{key}.state")
    if _uuid(data.get("leaseId"), f"{key}.leaseId", required=True) != lease_id:
        raise Malformed(
            f"{key} names another lease ({data.get('leaseId')})", f"{key} names another lease"
        )
    if data.get("providerLeaseId") != provider_lease_id or not provider_lease_id:
        raise Malformed(
            f"{key} names another sandbox ({data.get('providerLeaseId')!r})",
            f"{key} names another sandbox",
        )
    run_id = _uuid(data.get("runId"), f"{key}.runId")
    confirmed_at = _when(data.get("confirmedAt"), f"{key}.confirmedAt")
    if confirmed_at is None:
        raise Malformed(f"{key}.confirmedAt is missing: a queued request is not a receipt")
    payload = {**data, "source": "paperclip-mirror", "metadataKey": key}
    request_id = data.get("requestId")
    if not isinstance(request_id, str) or not request_id.strip():
        # The receipt is kept (evidence) under a stable id of its own. A
        # stop-and-retain receipt without a non-blank requestId is not
        # confirmed in Paperclip (hasConfirmedSandboxStopAndRetain): the
        # payload says the id was made up. A termination receipt has none.
        basis = "|".join(
            str(x) for x in (kind, lease_id, run_id, provider_lease_id, state, data["confirmedAt"])
        )
        request_id = "mirror:" + hashlib.sha256(basis.encode()).hexdigest()[:40]
        if kind == ReceiptKind.STOP_AND_RETAIN:
            payload["requestIdMissing"] = True
    return {
        "kind": kind,
        "lease_id": lease_id,
        "run_id": run_id,
        "provider_lease_id": provider_lease_id,
        "company_id": _company_of(data.get("companyId")),
        "state": state,
        "schema": schema,
        "confirmed_at": confirmed_at,
        "request_id": request_id[:200],
        "payload": payload,
    }


def _company_of(value) -> UUID | None:
    """A receipt's companyId as Paperclip compares it (`receipt.companyId !==
    lease.companyId`, a string equality with the uuid column's canonical text):
    anything else, or none, is None, and proves nothing for a lease that has
    a company. Never a reason to refuse the lease row."""
    if not isinstance(value, str) or not _CANONICAL_UUID.fullmatch(value):
        return None
    return UUID(value)
