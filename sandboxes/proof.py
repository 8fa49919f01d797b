"""The database half of the proof rule (docs/rules.md, proof): what a record's
sandbox is now, and its proof as read now. The rule itself, over receipts
already read, is `sandboxes/rules/proof.py`.

A **fingerprint** is what the sandbox is now: the lease id, the provider and
sandbox id the lease names, the lease's run id, the newest receipt Paperclip
reported for the sandbox (the console's own stops do not count), and the
workspace's `saved_at`. Each compare, export, attestation and approval receipt
records one; the gate recomputes it under the row lock, and the rule voids a
receipt whose fingerprint differs.
"""

from __future__ import annotations

from collections.abc import Iterable

from sandboxes.models import EnvironmentLease, Receipt, Retirement
from sandboxes.models.choices import PROVIDER_RECEIPT_KINDS, ReceiptKind, RetirementKind
from sandboxes.rules.proof import Proof, proof_from_receipts

# The actor of every receipt Paperclip reported (ingest and the mirror write it);
# the console's own receipts carry "system" or the operator's name.
PAPERCLIP = "paperclip"


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def _fingerprint(retirement: Retirement, lease, newest) -> dict:
    """`lease` with its workspace loaded; `newest`: (confirmed_at, pk) of the newest
    Paperclip-reported receipt naming the sandbox, or None."""
    workspace = lease.execution_workspace if lease is not None else None
    return {
        "lease_id": str(retirement.lease_id),
        # What the lease names now, not what the record names: the two differ
        # once the lease row is moved to another sandbox.
        "provider": lease.provider if lease is not None else None,
        "sandbox_id": lease.provider_lease_id if lease is not None else None,
        "run_id": str(lease.heartbeat_run_id) if lease and lease.heartbeat_run_id else None,
        "paperclip_receipt_id": str(newest[1]) if newest else None,
        "paperclip_receipt_at": _iso(newest[0]) if newest else None,
        "workspace_id": str(workspace.pk) if workspace is not None else None,
        "saved_at": _iso(workspace.saved_at) if workspace is not None else None,
    }


def _reported_by_paperclip(receipt: Receipt) -> bool:
    return receipt.actor == PAPERCLIP and receipt.kind in PROVIDER_RECEIPT_KINDS


def fingerprint_from(retirement: Retirement, lease, sandbox_receipts: Iterable[Receipt]) -> dict:
    """The fingerprint from rows a page already loaded: the record's lease (its
    workspace selected with it) and every receipt naming the record's sandbox."""
    newest = max(
        (
            ((r.confirmed_at, r.created_at, str(r.pk)), r.pk)
            for r in sandbox_receipts
            if _reported_by_paperclip(r) and r.provider_lease_id == retirement.provider_lease_id
        ),
        default=None,
    )
    return _fingerprint(retirement, lease, (newest[0][0], newest[1]) if newest else None)


def fingerprints_of(retirements: Iterable[Retirement]) -> dict:
    """{retirement pk: fingerprint} of what each record's sandbox is now, in two
    queries whatever the number of records."""
    retirements = list(retirements)
    if not retirements:
        return {}
    leases = {
        lease.pk: lease
        for lease in EnvironmentLease.objects.filter(
            pk__in={r.lease_id for r in retirements}
        ).select_related("execution_workspace")
    }
    newest: dict[tuple[str, str], tuple] = {}
    rows = Receipt.objects.filter(
        provider_lease_id__in={r.provider_lease_id for r in retirements},
        actor=PAPERCLIP,
        kind__in=PROVIDER_RECEIPT_KINDS,
    ).values_list("lease__provider", "provider_lease_id", "confirmed_at", "created_at", "pk")
    for provider, sandbox_id, confirmed_at, created_at, pk in rows:
        key = (provider, sandbox_id)
        order = (confirmed_at, created_at, str(pk))
        if key not in newest or order > newest[key][0]:
            newest[key] = (order, pk)
    result = {}
    for r in retirements:
        found = newest.get((r.provider, r.provider_lease_id))
        result[r.pk] = _fingerprint(
            r, leases.get(r.lease_id), (found[0][0], found[1]) if found else None
        )
    return result


def fingerprint_of(retirement: Retirement) -> dict:
    """What the record's sandbox is now (call under the row lock at destroy time)."""
    return fingerprints_of([retirement])[retirement.pk]


def replaced_workspace(retirement: Retirement):
    """The workspace resume_failed's proof re-checks: its lease's, read now (one
    query unless loaded); None for every other kind, whose proof never reads it."""
    if retirement.kind != RetirementKind.RESUME_FAILED:
        return None
    return retirement.lease.execution_workspace


def proof_for(retirement: Retirement) -> Proof:
    """The record's proof, bound to what its sandbox is now."""
    receipts = list(Receipt.objects.proof_of([retirement]))
    return proof_from_receipts(
        retirement,
        receipts,
        fingerprint_of(retirement),
        workspace=replaced_workspace(retirement),
    )


def approvals_of(retirement: Retirement) -> list[Receipt]:
    """The record's approval receipts, which `rules.proof.has_approval` judges."""
    return list(Receipt.objects.filter(retirement=retirement, kind=ReceiptKind.APPROVAL))
