"""Paperclip's own proof predicates, ported condition by condition (docs/rules.md, proof).

A stop counts only when Paperclip's predicate says so. The judge is
paperclipai/paperclip, read at these commits:

- `server/src/services/remote-execution-termination.ts` @ 555fcfccfda1f549ea1c84f559e9133a9a1f5fb5
  (`remoteTerminationReceipt` lines 9-22, `hasRemoteTerminationReceipt` lines 24-35);
- `server/src/services/sandbox-stop-and-retain.ts` @ c5df62352fd47c54520e7a39d56245fb2f7e5fc8
  (`hasConfirmedSandboxStopAndRetain` lines 15-43, `hasStopOnlyCleanup` lines 45-48);
- `server/src/services/native-runtime/native-workspace-export-resume.ts` @ 6868b1e
  (`hasNativeWorkspaceExportResume` lines 14-18);
- `server/src/services/sandbox-provider-runtime.ts` @ 2f3b957 (the built-in providers).

Paperclip reads one receipt from the lease's metadata; the console keeps every
receipt reported for a lease as its own row, so each function judges one receipt
against the lease as it is now. Each returns "" when the predicate holds, else
the first condition that fails, in words an operator reads.

Where the reporter is not Paperclip's database (an ingest client), fields it
does not send are judged as the issue of record says: the company condition
applies where the lease has a company, and the provider binding (method,
builtinProvider, pluginId) where the receipt or the lease names one. A receipt
mirrored from Paperclip is judged on every condition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

TERMINATION_SCHEMA = "paperclip.remote-termination.v1"
STOP_AND_RETAIN_SCHEMA = "paperclip.sandbox-stop-and-retain-receipt.v1"
# remote-execution-termination.ts line 30: the statuses a terminated lease may have.
TERMINATED_STATUSES = ("released", "expired", "failed")
# line 14: the states a termination receipt may confirm.
TERMINATION_STATES = ("stopped", "destroyed")
# sandbox-provider-runtime.ts @ 2f3b957: the providers Paperclip registers as built-ins.
BUILTIN_PROVIDERS = ("fake", "docker")
# The lease-metadata keys the predicates read (sandbox-stop-and-retain.ts line 10,
# native-workspace-export-resume.ts line 14).
STOP_INTENT_KEY = "sandboxStopAndRetain"
EXPORT_RESUME_KEY = "nativeWorkspaceExportResume"
# Written by the mirror on every receipt it reads from Paperclip's database.
MIRROR_SOURCE = "paperclip-mirror"


@dataclass(frozen=True)
class Lease:
    """A lease row as the predicates read it (ids as strings)."""

    id: str
    status: str
    provider: str | None
    provider_lease_id: str | None
    heartbeat_run_id: str | None
    acquired_at: datetime | None
    released_at: datetime | None
    expires_at: datetime | None = None
    cleanup_status: str | None = None
    company_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # A stop-only intent or a native export the console holds as its own rows
    # (a pending stop_and_retain intent, a pending export): Paperclip's metadata
    # keys, as ingest reports them.
    stop_only_pending: bool = False


@dataclass(frozen=True)
class Receipt:
    """A termination or stop-and-retain receipt (ids as strings). `provider` and
    the binding fields are None when the reporter did not send them."""

    kind: str
    lease_id: str
    run_id: str | None
    provider_lease_id: str
    confirmed_at: datetime
    state: str | None = None
    schema: str = ""
    company_id: str | None = None
    provider: str | None = None
    request_id: str = ""
    # The confirmation time exactly as Paperclip wrote it (an ISO string), for
    # the equality Paperclip checks; None when the reporter sent a parsed time.
    confirmed_at_text: str | None = None
    builtin_provider: str | None = None
    method: str | None = None
    plugin_id: str | None = None
    mirrored: bool = False  # read from Paperclip's own database


def _company(lease: Lease, receipt: Receipt) -> bool:
    # Lines 32 / 29: receipt.companyId === lease.companyId; an ingest client that
    # sends no company for the lease is judged without it.
    return lease.company_id is None or receipt.company_id == lease.company_id


def termination_refusal(lease: Lease, receipt: Receipt | None) -> str:
    """`hasRemoteTerminationReceipt(lease)` for this receipt: "" when it holds."""
    # remote-execution-termination.ts @ 555fcfc, line 29: lease.releasedAt truthy.
    if lease.released_at is None:
        return "the lease has no released_at"
    # line 29: cleanupStatus === "success".
    if lease.cleanup_status != "success":
        return f"the lease's cleanup_status is {lease.cleanup_status or 'unset'}, not success"
    # line 30: status in released, expired, failed.
    if lease.status not in TERMINATED_STATUSES:
        return f"the lease is {lease.status}, not released, expired or failed"
    # line 30: a receipt is present.
    if receipt is None or receipt.kind != "termination":
        return "no termination receipt"
    # line 31: the schema.
    if receipt.schema != TERMINATION_SCHEMA:
        return f"the termination receipt's schema is {receipt.schema or 'missing'}"
    # line 32: the company.
    if not _company(lease, receipt):
        return "the termination receipt names another company"
    # line 32, and line 12 (`!lease.heartbeatRunId`): the run.
    if lease.heartbeat_run_id is None or receipt.run_id != lease.heartbeat_run_id:
        return "the termination receipt names another run"
    # line 33: the lease.
    if receipt.lease_id != lease.id:
        return "the termination receipt names another lease"
    # line 33 and line 12 (`!lease.provider`): the provider. An ingest receipt
    # names none: it was recorded against the lease, whose provider it is.
    if not lease.provider or (receipt.provider is not None and receipt.provider != lease.provider):
        return "the termination receipt names another provider"
    # line 12: Paperclip never issues one for provider `local`. The console's own
    # embedded `local` provider, fed through ingest, is not Paperclip's.
    if lease.provider == "local" and receipt.mirrored:
        return "Paperclip issues no termination receipt for provider local"
    # lines 12-13: the sandbox.
    if not lease.provider_lease_id or receipt.provider_lease_id != lease.provider_lease_id:
        return "the termination receipt names another sandbox"
    # line 14: the state.
    if receipt.state not in TERMINATION_STATES:
        return f"the termination receipt's state is {receipt.state or 'missing'}"
    return ""


def has_remote_termination_receipt(lease: Lease, receipts) -> bool:
    """Some termination receipt of the lease satisfies Paperclip's predicate."""
    return any(not termination_refusal(lease, r) for r in receipts if r.kind == "termination")


def stopped_termination_refusal(lease: Lease, receipts) -> str:
    """ "" when some termination receipt of the lease is confirmed with state
    `stopped` (docs/rules.md, candidate kinds: "a confirmed stopped termination
    receipt"); else why the best one is refused."""
    terminations = [r for r in receipts if r.kind == "termination"]
    if not terminations:
        return termination_refusal(lease, None)
    reasons = []
    for r in sorted(terminations, key=lambda r: r.confirmed_at, reverse=True):
        why = termination_refusal(lease, r)
        if not why and r.state != "stopped":
            why = f"the termination receipt says {r.state}, not stopped"
        if not why:
            return ""
        reasons.append(why)
    return reasons[0]


def has_stop_only_cleanup(lease: Lease) -> bool:
    """`hasStopOnlyCleanup` (sandbox-stop-and-retain.ts lines 45-48): a stop-only
    intent is present - the key's presence, whatever its value ("invalid pins
    stay pending", line 74) - or a native workspace export-resume is."""
    metadata = lease.metadata or {}
    return STOP_INTENT_KEY in metadata or EXPORT_RESUME_KEY in metadata or lease.stop_only_pending


def _binding_refusal(lease: Lease, receipt: Receipt) -> str:
    """Lines 36-42: a built-in provider's stop, or a plugin's, consistent with the
    lease. Judged where the receipt or the lease names a binding (always, for a
    receipt mirrored from Paperclip)."""
    metadata = lease.metadata or {}
    plugin = metadata.get("pluginId")
    named = (
        receipt.builtin_provider is not None
        or receipt.method is not None
        or receipt.plugin_id is not None
        or plugin is not None
        or bool(metadata.get("sandboxProviderPlugin"))
    )
    if not named and not receipt.mirrored:
        return ""
    if receipt.builtin_provider is not None:
        # Lines 36-40: the lease's own built-in provider, stopped by the host.
        if (
            receipt.builtin_provider != lease.provider
            or lease.provider not in BUILTIN_PROVIDERS
            or receipt.method != "builtin.stopLease"
            or receipt.plugin_id is not None
            or plugin is not None
            or metadata.get("sandboxProviderPlugin")
        ):
            return "the stop-and-retain receipt's built-in provider does not match the lease"
        return ""
    # Lines 41-42: a plugin's stop, by the plugin that owns the lease.
    if (
        receipt.method != "environmentStopLease"
        or not (receipt.plugin_id or "").strip()
        or receipt.plugin_id != plugin
    ):
        return "the stop-and-retain receipt's plugin does not match the lease"
    return ""


def stop_and_retain_refusal(
    lease: Lease, receipt: Receipt | None, termination: Receipt | None, now: datetime
) -> str:
    """`hasConfirmedSandboxStopAndRetain(lease)` for this stop-and-retain receipt
    and the termination receipt beside it: "" when it holds. The conditions in
    Paperclip's order: the lease's times, the lease's state, then the receipt."""
    return (
        _lease_times_refusal(lease, now)
        or _lease_state_refusal(lease, receipt, termination)
        or _stop_receipt_refusal(lease, receipt, termination)
    )


def _lease_times_refusal(lease: Lease, now: datetime) -> str:
    # sandbox-stop-and-retain.ts @ c5df623, lines 16-20: acquired and released
    # times, and an expiry that has not passed.
    if lease.acquired_at is None:
        return "the lease has no acquired_at"
    if lease.released_at is None:
        return "the lease has no released_at"
    if lease.expires_at is not None and lease.expires_at <= now:
        return f"the lease expired at {lease.expires_at.isoformat()}"
    return ""


def _lease_state_refusal(lease: Lease, receipt: Receipt | None, termination: Receipt | None) -> str:
    # lines 21-22: a stop-and-retain receipt.
    if receipt is None or receipt.kind != "stop_and_retain":
        return "no stop-and-retain receipt"
    # line 25: the lease is released.
    if lease.status != "released":
        return f"the lease is {lease.status}, not released"
    # line 25: a confirmed termination (hasRemoteTerminationReceipt) ...
    why = termination_refusal(lease, termination)
    if why:
        return f"no confirmed termination: {why}"
    # line 26: ... that says stopped.
    if termination is None or termination.state != "stopped":
        return "the termination receipt does not say stopped"
    # line 26: no stop-only intent still pending.
    if has_stop_only_cleanup(lease):
        return "a stop-only intent is still pending"
    # line 27: not pendingCleanupInFlight.
    if (lease.metadata or {}).get("pendingCleanupInFlight") is True:
        return "a cleanup is in flight (pendingCleanupInFlight)"
    return ""


def _stop_receipt_refusal(
    lease: Lease, receipt: Receipt | None, termination: Receipt | None
) -> str:
    if receipt is None or termination is None:  # refused above already
        return "no stop-and-retain receipt" if receipt is None else "no termination receipt"
    # line 28: the schema.
    if receipt.schema != STOP_AND_RETAIN_SCHEMA:
        return f"the stop-and-retain receipt's schema is {receipt.schema or 'missing'}"
    # lines 29-31: company, run, lease, provider and sandbox are the lease's.
    bound = (
        ("company", _company(lease, receipt)),
        ("run", lease.heartbeat_run_id is not None and receipt.run_id == lease.heartbeat_run_id),
        ("lease", receipt.lease_id == lease.id),
        ("provider", receipt.provider is None or receipt.provider == lease.provider),
        ("sandbox", receipt.provider_lease_id == lease.provider_lease_id),
    )
    for what, ok in bound:
        if not ok:
            return f"the stop-and-retain receipt names another {what}"
    # line 32: a non-empty request id.
    if not (receipt.request_id or "").strip():
        return "the stop-and-retain receipt has no request id"
    # line 33: confirmedAt identical to the termination's.
    if not _same_confirmation(receipt, termination):
        return "the stop-and-retain receipt was confirmed at another time than the termination"
    # lines 34-35: acquiredAt <= confirmedAt <= releasedAt (both set: checked first).
    if lease.acquired_at is not None and receipt.confirmed_at < lease.acquired_at:
        return "the stop-and-retain receipt was confirmed before the lease was acquired"
    if lease.released_at is not None and receipt.confirmed_at > lease.released_at:
        return "the stop-and-retain receipt was confirmed after the release"
    # lines 36-42: the provider binding.
    return _binding_refusal(lease, receipt)


def _same_confirmation(receipt: Receipt, termination: Receipt) -> bool:
    """Paperclip compares the two ISO strings; where both are known as written,
    so does this, else the times."""
    if receipt.confirmed_at_text is not None and termination.confirmed_at_text is not None:
        return receipt.confirmed_at_text == termination.confirmed_at_text
    return receipt.confirmed_at == termination.confirmed_at


def confirmed_stop_and_retain_refusal(lease: Lease, receipts, now: datetime) -> str:
    """ "" when some stop-and-retain receipt of the lease, with a termination
    receipt beside it, satisfies `hasConfirmedSandboxStopAndRetain`; else why
    the newest one is refused."""
    stops = sorted(
        (r for r in receipts if r.kind == "stop_and_retain"),
        key=lambda r: r.confirmed_at,
        reverse=True,
    )
    terminations = sorted(
        (r for r in receipts if r.kind == "termination"), key=lambda r: r.confirmed_at
    )
    if not stops:
        return stop_and_retain_refusal(lease, None, None, now)
    reasons = []
    for stop in stops:
        # The termination it was settled with: confirmed at the same moment.
        beside = [t for t in terminations if _same_confirmation(stop, t)] or terminations[-1:]
        why = stop_and_retain_refusal(lease, stop, beside[0] if beside else None, now)
        if not why:
            return ""
        reasons.append(why)
    return reasons[0]
