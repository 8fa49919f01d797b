"""The console's own receipts: one writer for the reconciler's steps and the
operator's actions (Paperclip's receipts arrive through ingest and the mirror).

A receipt names the record's lease, the lease's run and exactly its sandbox;
receipts are append-only (docs/rules.md, claims and failures)."""

from __future__ import annotations

import uuid

from django.utils import timezone

from sandboxes.models import Receipt, Retirement
from sandboxes.models.choices import RECEIPT_SCHEMAS, ReceiptKind, TerminationState
from sandboxes.providers.base import Confirmation

SYSTEM = "system"  # the actor of the reconciler's receipts


def write_receipt(
    r: Retirement,
    kind: str,
    *,
    payload: dict,
    request_id: str = "",
    state: str | None = None,
    at=None,
    actor: str = SYSTEM,
) -> Receipt:
    """One receipt on record `r`; `request_id` defaults to a fresh one."""
    return Receipt.objects.create(
        kind=kind,
        lease_id=r.lease_id,
        run_id=r.lease.heartbeat_run_id,
        retirement=r,
        provider_lease_id=r.provider_lease_id,
        # Bound to the lease's company, as Paperclip binds its own (docs/rules.md, proof).
        company_id=r.lease.company_id,
        state=state,
        schema=RECEIPT_SCHEMAS.get(kind, ""),
        confirmed_at=at or timezone.now(),
        request_id=request_id or uuid.uuid4().hex,
        payload=payload,
        actor=actor,
    )


def write_stop_receipts(r: Retirement, conf: Confirmation, *, retain: bool) -> None:
    """A confirmed stop: a `termination` receipt (state `stopped`), and with
    `retain` the `stop_and_retain` receipt of a stop that keeps the sandbox."""
    payload = conf.as_payload() | {"by": "console"}
    kinds = [ReceiptKind.TERMINATION] + ([ReceiptKind.STOP_AND_RETAIN] if retain else [])
    for kind in kinds:
        write_receipt(
            r,
            kind,
            request_id=conf.request_id,
            payload=payload,
            state=TerminationState.STOPPED,
            at=conf.confirmed_at,
        )
