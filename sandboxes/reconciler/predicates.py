"""Paperclip's predicates (sandboxes/rules/paperclip.py) over the console's rows:
the lease and receipt rows read as the pure rules take them, and the loaders
the preservation source, the gate and the pages ask (docs/rules.md, proof).

The listing asks the same question in SQL (candidates.py, `_stop_receipt`);
tests/reconciler/test_paperclip_predicates.py breaks each condition alone and
checks that the two agree."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from sandboxes.models import EnvironmentLease, LeaseIntent, PendingExport, Receipt
from sandboxes.models.choices import (
    PROVIDER_RECEIPT_KINDS,
    ExportState,
    IntentKind,
    IntentState,
)
from sandboxes.rules import paperclip as rules


def _str(value) -> str | None:
    return None if value is None else str(value)


def lease_view(lease: EnvironmentLease, *, stop_only_pending: bool = False) -> rules.Lease:
    return rules.Lease(
        id=str(lease.pk),
        status=lease.status,
        provider=lease.provider or None,
        provider_lease_id=lease.provider_lease_id or None,
        heartbeat_run_id=_str(lease.heartbeat_run_id),
        acquired_at=lease.acquired_at,
        released_at=lease.released_at,
        expires_at=lease.expires_at,
        cleanup_status=lease.cleanup_status,
        company_id=_str(lease.company_id),
        metadata=lease.metadata or {},
        stop_only_pending=stop_only_pending,
    )


def _field(payload: dict, camel: str, snake: str):
    """A receipt field as Paperclip names it (the mirror keeps Paperclip's
    payload) or as the ingest API does."""
    value = payload.get(camel, payload.get(snake))
    return value if isinstance(value, str) else None


def receipt_view(receipt: Receipt) -> rules.Receipt:
    payload = receipt.payload or {}
    # The request id as the reporter sent it: the mirror flags one Paperclip's
    # receipt lacked, and ingest keeps what the client sent (None if nothing) in
    # the payload, while the column falls back to the event id.
    if payload.get("requestIdMissing"):
        request_id = ""
    elif "request_id" in payload:
        request_id = payload["request_id"] or ""
    else:
        request_id = receipt.request_id
    text = payload.get("confirmedAt")
    return rules.Receipt(
        kind=receipt.kind,
        lease_id=str(receipt.lease_id),
        run_id=_str(receipt.run_id),
        provider_lease_id=receipt.provider_lease_id,
        confirmed_at=receipt.confirmed_at,
        state=receipt.state,
        schema=receipt.schema,
        company_id=_str(receipt.company_id),
        provider=_field(payload, "provider", "provider"),
        request_id=request_id,
        confirmed_at_text=text if isinstance(text, str) else None,
        builtin_provider=_field(payload, "builtinProvider", "builtin_provider"),
        method=_field(payload, "method", "method"),
        plugin_id=_field(payload, "pluginId", "plugin_id"),
        mirrored=payload.get("source") == rules.MIRROR_SOURCE,
    )


def _stop_only_pending(lease_ids: set) -> set:
    """Leases with a pending stop-only intent or native export held as rows (what
    ingest reports of Paperclip's metadata keys). 2 queries."""
    intents = LeaseIntent.objects.filter(
        lease_id__in=lease_ids,
        state=IntentState.PENDING,
        kind__in=(IntentKind.STOP_AND_RETAIN, IntentKind.EXPORT_RESUME),
    ).values_list("lease_id", flat=True)
    exports = PendingExport.objects.filter(
        lease_id__in=lease_ids, state=ExportState.PENDING
    ).values_list("lease_id", flat=True)
    return set(intents) | set(exports)


def stop_and_retain_refusals(
    leases: Iterable[EnvironmentLease], now: datetime
) -> dict[object, str]:
    """{lease pk: why its stop-and-retain is not confirmed ("" when it is)}, for
    `hasConfirmedSandboxStopAndRetain`. 3 queries whatever the number of leases."""
    leases = list(leases)
    ids = {lease.pk for lease in leases}
    if not ids:
        return {}
    receipts = defaultdict(list)
    for r in Receipt.objects.filter(lease_id__in=ids, kind__in=PROVIDER_RECEIPT_KINDS):
        receipts[r.lease_id].append(receipt_view(r))
    pending = _stop_only_pending(ids)
    return {
        lease.pk: rules.confirmed_stop_and_retain_refusal(
            lease_view(lease, stop_only_pending=lease.pk in pending), receipts[lease.pk], now
        )
        for lease in leases
    }


def stop_refusals(lease_ids) -> dict:
    """{lease id: why its termination receipt does not confirm a stop} for the
    leases that have one.
    2 queries whatever their number."""
    ids = set(lease_ids)
    if not ids:
        return {}
    receipts = defaultdict(list)
    for r in Receipt.objects.filter(lease_id__in=ids, kind__in=PROVIDER_RECEIPT_KINDS):
        receipts[r.lease_id].append(receipt_view(r))
    # A lease with no termination receipt at all needs no more words than the
    # hold's own ("no confirmed stop receipt ... yet").
    return {
        lease.pk: rules.stopped_termination_refusal(lease_view(lease), receipts[lease.pk])
        for lease in EnvironmentLease.objects.filter(pk__in=ids)
        if any(r.kind == "termination" for r in receipts[lease.pk])
    }
