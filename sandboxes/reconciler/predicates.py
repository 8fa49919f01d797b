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
from typing import Any, NamedTuple

import orjson
from django.db import connection
from django.db.models.expressions import RawSQL

from sandboxes.models import EnvironmentLease, LeaseIntent, PendingExport, Receipt
from sandboxes.models.choices import (
    PROVIDER_RECEIPT_KINDS,
    ExportState,
    IntentKind,
    IntentState,
    ReceiptKind,
)
from sandboxes.rules import paperclip as rules
from sandboxes.rules.frozen import build
from sandboxes.staging import uuid_array

from .rows import fetch_rows


def _str(value) -> str | None:
    return None if value is None else str(value)


def lease_view(
    lease: EnvironmentLease | LeaseRow, *, stop_only_pending: bool = False
) -> rules.Lease:
    return _lease(
        lease.pk,
        lease.status,
        lease.provider,
        lease.provider_lease_id,
        lease.heartbeat_run_id,
        lease.acquired_at,
        lease.released_at,
        lease.expires_at,
        lease.cleanup_status,
        lease.company_id,
        lease.metadata,
        stop_only_pending,
    )


def _lease(
    pk,
    status,
    provider,
    provider_lease_id,
    heartbeat_run_id,
    acquired_at,
    released_at,
    expires_at,
    cleanup_status,
    company_id,
    metadata,
    stop_only_pending=False,
) -> rules.Lease:
    """lease_view of a lease's values, in LeaseRow's order (stop_refusals reads
    them as a row; rules.Lease built in one update, sandboxes/rules/frozen.py)."""
    return build(
        rules.Lease,
        id=str(pk),
        status=status,
        provider=provider or None,
        provider_lease_id=provider_lease_id or None,
        heartbeat_run_id=_str(heartbeat_run_id),
        acquired_at=acquired_at,
        released_at=released_at,
        expires_at=expires_at,
        cleanup_status=cleanup_status,
        company_id=_str(company_id),
        metadata=metadata or {},
        stop_only_pending=stop_only_pending,
    )


def _field(payload: dict, camel: str, snake: str):
    """A receipt field as Paperclip names it (the mirror keeps Paperclip's
    payload) or as the ingest API does."""
    value = payload.get(camel, payload.get(snake))
    return value if isinstance(value, str) else None


def receipt_view(receipt: Receipt | ReceiptRow) -> rules.Receipt:
    return _receipt(
        receipt.kind,
        receipt.lease_id,
        receipt.run_id,
        receipt.provider_lease_id,
        receipt.confirmed_at,
        receipt.state,
        receipt.schema,
        receipt.company_id,
        receipt.payload,
        receipt.request_id,
    )


def _receipt(
    kind,
    lease_id,
    run_id,
    provider_lease_id,
    confirmed_at,
    state,
    schema,
    company_id,
    payload,
    request_id,
) -> rules.Receipt:
    """receipt_view of a receipt's values, in ReceiptRow's order (stop_refusals
    reads them as a row; rules.Receipt built in one update)."""
    payload = payload or {}
    # The request id as the reporter sent it: the mirror flags one Paperclip's
    # receipt lacked, and ingest keeps what the client sent (None if nothing) in
    # the payload, while the column falls back to the event id.
    if payload.get("requestIdMissing"):
        request_id = ""
    elif "request_id" in payload:
        request_id = payload["request_id"] or ""
    text = payload.get("confirmedAt")
    return build(
        rules.Receipt,
        kind=kind,
        lease_id=str(lease_id),
        run_id=_str(run_id),
        provider_lease_id=provider_lease_id,
        confirmed_at=confirmed_at,
        state=state,
        schema=schema,
        company_id=_str(company_id),
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


class ReceiptRow(NamedTuple):
    """What receipt_view reads of a receipt, read as a row (stop_refusals)."""

    kind: str
    lease_id: Any
    run_id: Any
    provider_lease_id: str
    confirmed_at: datetime
    state: str | None
    schema: str
    company_id: Any
    payload: dict
    request_id: str


class LeaseRow(NamedTuple):
    """What lease_view reads of a lease, read as a row (stop_refusals)."""

    pk: Any
    status: str
    provider: str
    provider_lease_id: str
    heartbeat_run_id: Any
    acquired_at: datetime | None
    released_at: datetime | None
    expires_at: datetime | None
    cleanup_status: str
    company_id: Any
    metadata: dict


_ROW_FIELDS = (*ReceiptRow._fields, *(f"lease__{name}" for name in LeaseRow._fields))


def _any_of(ids: set) -> Any:
    """The right-hand side of `lease_id__in` for many ids: on PostgreSQL one
    array parameter. Django's IN list binds each id on its own, client-side,
    and PostgreSQL then scans every receipt rather than probe the index for a
    few thousand ids; the array is probed id by id."""
    if connection.vendor != "postgresql":
        return ids
    return RawSQL("SELECT unnest(%s::uuid[])", [uuid_array(ids)])


def stop_refusals(lease_ids) -> dict:
    """{lease id: why its termination receipt does not confirm a stop} for the
    leases that have one.
    1 query whatever their number: the termination receipts with their lease's
    fields, as rows (only termination receipts decide it)."""
    ids = set(lease_ids)
    if not ids:
        return {}
    rows = fetch_rows(
        Receipt.objects.filter(lease_id__in=_any_of(ids), kind=ReceiptKind.TERMINATION).values_list(
            *_ROW_FIELDS
        ),
        uuids_as_text=True,  # the views hold ids as strings
    )
    # Plain tuples, not ReceiptRow and LeaseRow: their values go straight to the views.
    receipts: dict = defaultdict(list)
    leases: dict = {}
    split = len(ReceiptRow._fields)
    for row in rows:
        receipts[row[1]].append(_receipt(*row[:split]))  # row[1]: the receipt's lease_id
        leases.setdefault(row[1], row[split:])
    # The caller's ids by their text (orjson writes a UUID as str() does); a
    # backend that returned UUIDs keys the rows by them already.
    asked = list(ids)
    pk = dict(zip(orjson.loads(orjson.dumps(asked)), asked, strict=True))
    # A lease with no termination receipt at all needs no more words than the
    # hold's own ("no confirmed stop receipt ... yet").
    return {
        pk.get(key, key): rules.stopped_termination_refusal(_lease(*lease), receipts[key])
        for key, lease in leases.items()
    }
