"""The proof rule (docs/rules.md, proof): the one place that decides whether a sandbox
may be destroyed. Every destroy, and every approval, asks it.

Proof is one of, for this retirement and exactly this sandbox:
- the latest `salvage_compare` receipt is clean (nothing unsaved);
- a `salvage_export` receipt, fully verified, for that latest compare;
- an `operator_attested` receipt on which an admin typed this sandbox's id.

Proof is bound to what it saw. Each compare, export, attestation and approval
receipt records a **fingerprint**: the lease id, the provider and sandbox id the
lease names, the lease's run id, the newest receipt Paperclip reported for the
sandbox (the console's own stops do not count), and the workspace's `saved_at`.
The gate recomputes it under the row lock; a receipt whose fingerprint differs
proves nothing ("proof void: the lease was resumed after the compare"), and an
approval counts only for the proof receipt, and the fingerprint, it approved.

Receipt payload conventions (written by the reconciler and the console):
- salvage_compare: {"clean": bool, "added": [...], "changed": [...], "deleted": [...],
  "counts": {...}, "bytes": int, "listing_digest": str, "fingerprint": {...}}
  or, when the compare could not see the workspace, {"clean": false,
  "root_not_found": true, "error": "workspace root not found", "detail": str, ...}
- salvage_export: {"verified": bool, "compare_receipt_id": str, "files": [...], "deleted": [...],
  "fingerprint": {...}}
- operator_attested: {"typed_sandbox_id": str, "reason": str, "user": str, "fingerprint": {...}}
- approval: {"user": str, "reason": str, "proof_receipt_id": str, "fingerprint": {...}}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sandboxes.models import EnvironmentLease, Receipt, Retirement
from sandboxes.models.choices import PROVIDER_RECEIPT_KINDS, ReceiptKind, RetirementKind, SaveState

PROOF_KINDS = (
    ReceiptKind.SALVAGE_COMPARE,
    ReceiptKind.SALVAGE_EXPORT,
    ReceiptKind.OPERATOR_ATTESTED,
)

# The actor of every receipt Paperclip reported (ingest and the mirror write it);
# the console's own receipts carry "system" or the operator's name.
PAPERCLIP = "paperclip"

# What a fingerprint holds, in the order a change is explained, with the plain
# words that say what moved ("proof void: <words> after the <what>").
FINGERPRINT_FIELDS = (
    ("lease_id", "the record names another lease"),
    # A lease row re-sent naming another sandbox describes that sandbox from then
    # on: nothing seen of this one before the move proves anything (docs/rules.md, proof).
    ("provider", "the lease now names another provider"),
    ("sandbox_id", "the lease now names another sandbox"),
    ("run_id", "the lease was resumed"),
    ("paperclip_receipt_id", "Paperclip reported a newer stop receipt"),
    ("workspace_id", "the lease moved to another workspace"),
    ("saved_at", "the workspace was saved again"),
)


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


def void_reason(recorded, current: dict, what: str) -> str:
    """ "" when `recorded` still matches `current`, else why the proof is void."""
    if not isinstance(recorded, dict):
        return f"proof void: the {what} recorded no fingerprint of what it saw"
    for name, moved in FINGERPRINT_FIELDS:
        if recorded.get(name) != current.get(name):
            return f"proof void: {moved} after the {what}"
    return ""


@dataclass(frozen=True)
class Proof:
    ok: bool
    reason: str
    receipt: Receipt | None = None
    # The fingerprint the proof was checked against (None: not checked, display only).
    fingerprint: dict | None = None
    # Set when a receipt would have been proof but what it saw has moved on.
    void: str = ""
    void_receipt: Receipt | None = None

    def __bool__(self) -> bool:
        return self.ok


# What an approval of a replacement proof names instead of a proof receipt.
REPLACEMENT = "replacement"


def proof_key(proof: Proof | None) -> str:
    """What an approval or a notice is bound to: the receipt the proof rests on,
    or REPLACEMENT for resume_failed's proof by its replacement; "" without proof."""
    if not proof:
        return ""
    return str(proof.receipt.pk) if proof.receipt is not None else REPLACEMENT


def replacement_proof(retirement: Retirement, fingerprint: dict | None = None) -> Proof:
    """`resume_failed` only (docs/rules.md, candidate kinds; seed 004): Paperclip checked the proof
    when it replaced the sandbox (clean workspace, committed save, verified
    backup). The console re-checks that the workspace is still saved - a
    committed save (with its final checkpoint) - and that no writer holds it;
    it never starts or compares the sandbox."""
    ws = retirement.lease.execution_workspace
    if ws is None:
        return Proof(False, "the replaced lease names no workspace to re-check")
    if ws.save_state != SaveState.SAVED or ws.final_checkpoint_at is None:
        return Proof(False, "the workspace is no longer saved with a committed save")
    if ws.writer_run_id is not None:
        return Proof(False, "a writer holds the workspace")
    return Proof(
        True,
        "replaced by Paperclip: the workspace is saved and has no writer",
        fingerprint=fingerprint,
    )


def proof_from_receipts(
    retirement: Retirement, receipts: list[Receipt], fingerprint: dict | None = None
) -> Proof:
    """Pure decision over already-loaded receipts (any order).

    `fingerprint` is what the sandbox is now (`fingerprint_of`); every destroy,
    approval and plan passes it. Without it the proof is not bound (pages that
    only describe a record, the chaos invariants' replay)."""
    if retirement.kind == RetirementKind.RESUME_FAILED:
        # Proved by its replacement (seed 004): a re-read of the workspace.
        return replacement_proof(retirement, fingerprint)
    mine = _own_receipts(retirement, receipts)
    binding = _Binding(fingerprint)
    attested = _by_attestation(retirement, mine, binding)
    if attested is not None:
        return attested
    return _by_compare(mine, binding)


class _Binding:
    """Checks receipts against the sandbox as it is now and remembers the last
    one it voided: a refusal names that void rather than its own reason."""

    def __init__(self, fingerprint: dict | None) -> None:
        self.fingerprint = fingerprint
        self.voided: list[tuple[str, Receipt]] = []

    def bound(self, receipt: Receipt, what: str) -> bool:
        if self.fingerprint is None:
            return True
        why = void_reason(receipt.payload.get("fingerprint"), self.fingerprint, what)
        if why:
            self.voided.append((why, receipt))
        return not why

    def no(self, reason: str) -> Proof:
        why, receipt = self.voided[-1] if self.voided else ("", None)
        return Proof(
            False, why or reason, fingerprint=self.fingerprint, void=why, void_receipt=receipt
        )

    def yes(self, reason: str, receipt: Receipt) -> Proof:
        return Proof(True, reason, receipt, fingerprint=self.fingerprint)


def _own_receipts(retirement: Retirement, receipts: list[Receipt]) -> list[Receipt]:
    """The receipts of this retirement and exactly this sandbox and lease."""
    return [
        r
        for r in receipts
        if r.retirement_id == retirement.pk
        and r.provider_lease_id == retirement.provider_lease_id
        and r.lease_id == retirement.lease_id
    ]


def _by_attestation(retirement: Retirement, mine: list[Receipt], binding: _Binding) -> Proof | None:
    """The newest still-bound attestation on which this sandbox's id was typed
    (with a reason), or None."""
    attested = sorted(
        (
            r
            for r in mine
            if r.kind == ReceiptKind.OPERATOR_ATTESTED
            and r.payload.get("typed_sandbox_id") == retirement.provider_lease_id
            and (r.payload.get("reason") or "").strip()
        ),
        key=_order,
        reverse=True,
    )
    for r in attested:
        if binding.bound(r, "attestation"):
            return binding.yes("an admin attested that unsaved work may be discarded", r)
    return None


def _by_compare(mine: list[Receipt], binding: _Binding) -> Proof:
    """The latest compare, if clean and bound, or a verified, bound export of it."""
    compares = sorted((r for r in mine if r.kind == ReceiptKind.SALVAGE_COMPARE), key=_order)
    if not compares:
        return binding.no("no salvage compare has been recorded yet")
    # Only the LATEST compare counts: a dirty compare after a clean one voids it.
    latest = compares[-1]
    if latest.payload.get("root_not_found"):
        return binding.no("workspace root not found: the latest compare could not see the files")
    if not binding.bound(latest, "compare"):
        return binding.no("the latest compare no longer matches the sandbox")
    # Only an explicit `clean: true` counts as clean.
    if latest.payload.get("clean") is True:
        return binding.yes("the latest compare found nothing unsaved", latest)
    for r in sorted(mine, key=_order, reverse=True):
        if (
            r.kind == ReceiptKind.SALVAGE_EXPORT
            and r.payload.get("verified") is True
            and r.payload.get("compare_receipt_id") == str(latest.pk)
            and binding.bound(r, "export")
        ):
            return binding.yes("every unsaved file was exported and verified", r)
    return binding.no("unsaved files found and no verified export of them yet")


def _order(r: Receipt):
    return (r.confirmed_at, r.created_at or r.confirmed_at)


def proof_for(retirement: Retirement) -> Proof:
    """The record's proof, bound to what its sandbox is now."""
    receipts = list(
        Receipt.objects.filter(retirement=retirement, kind__in=PROOF_KINDS).order_by(
            "confirmed_at", "created_at"
        )
    )
    return proof_from_receipts(retirement, receipts, fingerprint_of(retirement))


def approval_for(proof: Proof, approval: Receipt) -> bool:
    """An approval counts only for the proof receipt it approved, seen as it is now."""
    if not proof:
        return False
    # A replacement proof (resume_failed) has no receipt: its approval names it.
    if approval.payload.get("proof_receipt_id") != proof_key(proof):
        return False
    if proof.fingerprint is None:
        return True
    return not void_reason(approval.payload.get("fingerprint"), proof.fingerprint, "approval")


def has_approval(
    retirement: Retirement, proof: Proof, receipts: list[Receipt] | None = None
) -> bool:
    """Whether an approval was given for exactly this proof (docs/rules.md, proof: an
    approval is bound to the proof it approved)."""
    if receipts is None:
        receipts = list(Receipt.objects.filter(retirement=retirement, kind=ReceiptKind.APPROVAL))
    return any(
        r.kind == ReceiptKind.APPROVAL
        and r.retirement_id == retirement.pk
        and approval_for(proof, r)
        for r in receipts
    )
