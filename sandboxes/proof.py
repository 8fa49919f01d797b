"""The proof rule (DOMAIN §2.3): the one place that decides whether a sandbox
may be destroyed. Every destroy, and every approval, asks it.

Proof is one of, for this retirement and exactly this sandbox:
- the latest `salvage_compare` receipt is clean (nothing unsaved);
- a `salvage_export` receipt, fully verified, for that latest compare;
- an `operator_attested` receipt on which an admin typed this sandbox's id.

Receipt payload conventions (written by the reconciler and the console):
- salvage_compare: {"clean": bool, "added": [...], "changed": [...], "deleted": [...],
  "counts": {...}, "bytes": int, "listing_digest": str}
- salvage_export: {"verified": bool, "compare_receipt_id": str, "files": [...], "deleted": [...]}
- operator_attested: {"typed_sandbox_id": str, "reason": str, "user": str}
- approval: {"user": str, "reason": str}
"""

from dataclasses import dataclass

from sandboxes.models import Receipt, Retirement
from sandboxes.models.choices import ReceiptKind

PROOF_KINDS = (
    ReceiptKind.SALVAGE_COMPARE,
    ReceiptKind.SALVAGE_EXPORT,
    ReceiptKind.OPERATOR_ATTESTED,
)


@dataclass(frozen=True)
class Proof:
    ok: bool
    reason: str
    receipt: Receipt | None = None

    def __bool__(self) -> bool:
        return self.ok


def proof_from_receipts(retirement: Retirement, receipts: list[Receipt]) -> Proof:
    """Pure decision over already-loaded receipts (any order)."""
    mine = [
        r
        for r in receipts
        if r.retirement_id == retirement.pk
        and r.provider_lease_id == retirement.provider_lease_id
        and r.lease_id == retirement.lease_id
    ]
    for r in mine:
        if (
            r.kind == ReceiptKind.OPERATOR_ATTESTED
            and r.payload.get("typed_sandbox_id") == retirement.provider_lease_id
            and (r.payload.get("reason") or "").strip()
        ):
            return Proof(True, "an admin attested that unsaved work may be discarded", r)

    compares = sorted(
        (r for r in mine if r.kind == ReceiptKind.SALVAGE_COMPARE),
        key=lambda r: (r.confirmed_at, r.created_at or r.confirmed_at),
    )
    if not compares:
        return Proof(False, "no salvage compare has been recorded yet")
    latest = compares[-1]
    if latest.payload.get("root_not_found"):
        return Proof(False, "workspace root not found: the latest compare could not see the files")
    if latest.payload.get("clean") is True:
        return Proof(True, "the latest compare found nothing unsaved", latest)
    for r in mine:
        if (
            r.kind == ReceiptKind.SALVAGE_EXPORT
            and r.payload.get("verified") is True
            and r.payload.get("compare_receipt_id") == str(latest.pk)
        ):
            return Proof(True, "every unsaved file was exported and verified", r)
    return Proof(False, "unsaved files found and no verified export of them yet")


def proof_for(retirement: Retirement) -> Proof:
    receipts = list(
        Receipt.objects.filter(retirement=retirement, kind__in=PROOF_KINDS).order_by(
            "confirmed_at", "created_at"
        )
    )
    return proof_from_receipts(retirement, receipts)


def has_approval(retirement: Retirement, receipts: list[Receipt] | None = None) -> bool:
    if receipts is None:
        return Receipt.objects.filter(retirement=retirement, kind=ReceiptKind.APPROVAL).exists()
    return any(
        r.kind == ReceiptKind.APPROVAL and r.retirement_id == retirement.pk for r in receipts
    )
