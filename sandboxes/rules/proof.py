"""The proof rule (docs/rules.md, proof): whether a sandbox may be destroyed,
decided over receipts already read. Every destroy, and every approval, asks it.

Proof is one of, for this retirement and exactly this sandbox:
- the latest `salvage_compare` receipt is clean (nothing unsaved);
- a `salvage_export` receipt, fully verified, for that latest compare;
- an `operator_attested` receipt on which an admin typed this sandbox's id;
- for `resume_failed` only, its replacement: the workspace, passed in as read
  now, is still saved with a committed save and no writer holds it.

Proof is bound to what it saw. Each compare, export, attestation and approval
receipt records a **fingerprint** of the sandbox (`FINGERPRINT_FIELDS`); the
caller passes the fingerprint of the sandbox as it is now
(`sandboxes/proof.py` reads it from the database), and a receipt whose
fingerprint differs proves nothing ("proof void: the lease was resumed after
the compare"). An approval counts only for the proof, and the fingerprint, it
approved.

Receipt payload conventions (written by the reconciler and the console):
- salvage_compare: {"clean": bool, "added": [...], "changed": [...], "deleted": [...],
  "counts": {...}, "bytes": int, "listing_digest": str, "fingerprint": {...}}
  or, when the compare could not see the workspace, {"clean": false,
  "root_not_found": true, "error": "workspace root not found", "detail": str, ...}
- salvage_export: {"verified": bool, "compare_receipt_id": str, "files": [...], "deleted": [...],
  "fingerprint": {...}}
- operator_attested: {"typed_sandbox_id": str, "reason": str, "user": str, "fingerprint": {...}}
- approval: {"user": str, "reason": str, "proof_receipt_id": str, "fingerprint": {...}}

The rule reads plain attributes (`Record`, `ReceiptData`, `Workspace`): a
model row has them, and so does the plain data the tests build.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from .codes import ReceiptKind, RetirementKind, SaveState

PROOF_KINDS = (
    ReceiptKind.SALVAGE_COMPARE,
    ReceiptKind.SALVAGE_EXPORT,
    ReceiptKind.OPERATOR_ATTESTED,
)

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


class Record(Protocol):
    """What the rule reads of a retirement record."""

    @property
    def pk(self) -> Any: ...
    @property
    def kind(self) -> str: ...
    @property
    def lease_id(self) -> Any: ...
    @property
    def provider_lease_id(self) -> str: ...


class ReceiptData(Protocol):
    """What the rule reads of a receipt."""

    @property
    def pk(self) -> Any: ...
    @property
    def kind(self) -> str: ...
    @property
    def retirement_id(self) -> Any: ...
    @property
    def lease_id(self) -> Any: ...
    @property
    def provider_lease_id(self) -> str: ...
    @property
    def payload(self) -> dict: ...
    @property
    def confirmed_at(self) -> datetime: ...
    @property
    def created_at(self) -> datetime | None: ...


class Workspace(Protocol):
    """What resume_failed's proof re-checks of the lease's workspace."""

    @property
    def save_state(self) -> str: ...
    @property
    def final_checkpoint_at(self) -> datetime | None: ...
    @property
    def writer_run_id(self) -> Any: ...


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
    receipt: ReceiptData | None = None
    # The fingerprint the proof was checked against (None: not checked, display only).
    fingerprint: dict | None = None
    # Set when a receipt would have been proof but what it saw has moved on.
    void: str = ""
    void_receipt: ReceiptData | None = None

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


def replacement_proof(workspace: Workspace | None, fingerprint: dict | None = None) -> Proof:
    """`resume_failed` only (docs/rules.md, candidate kinds; seed 004): Paperclip checked the proof
    when it replaced the sandbox (clean workspace, committed save, verified
    backup). The console re-checks that the lease's workspace, as read now, is
    still saved - a committed save (with its final checkpoint) - and that no
    writer holds it; it never starts or compares the sandbox."""
    if workspace is None:
        return Proof(False, "the replaced lease names no workspace to re-check")
    if workspace.save_state != SaveState.SAVED or workspace.final_checkpoint_at is None:
        return Proof(False, "the workspace is no longer saved with a committed save")
    if workspace.writer_run_id is not None:
        return Proof(False, "a writer holds the workspace")
    return Proof(
        True,
        "replaced by Paperclip: the workspace is saved and has no writer",
        fingerprint=fingerprint,
    )


def proof_from_receipts(
    record: Record,
    receipts: Iterable[ReceiptData],
    fingerprint: dict | None = None,
    *,
    workspace: Workspace | None = None,
) -> Proof:
    """The record's proof, from its receipts (any order, others' ignored).

    `fingerprint` is what the sandbox is now; every destroy, approval and plan
    passes it. Without it the proof is not bound (pages that only describe a
    record, the chaos invariants' replay). `workspace` is the lease's workspace
    as read now, which only resume_failed's proof reads."""
    if record.kind == RetirementKind.RESUME_FAILED:
        # Proved by its replacement (seed 004): a re-read of the workspace.
        return replacement_proof(workspace, fingerprint)
    mine = _own_receipts(record, receipts)
    binding = _Binding(fingerprint)
    attested = _by_attestation(record, mine, binding)
    if attested is not None:
        return attested
    return _by_compare(mine, binding)


class _Binding:
    """Checks receipts against the sandbox as it is now and remembers the last
    one it voided: a refusal names that void rather than its own reason."""

    def __init__(self, fingerprint: dict | None) -> None:
        self.fingerprint = fingerprint
        self.voided: list[tuple[str, ReceiptData]] = []

    def bound(self, receipt: ReceiptData, what: str) -> bool:
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

    def yes(self, reason: str, receipt: ReceiptData) -> Proof:
        return Proof(True, reason, receipt, fingerprint=self.fingerprint)


def _own_receipts(record: Record, receipts: Iterable[ReceiptData]) -> list[ReceiptData]:
    """The receipts of this retirement and exactly this sandbox and lease."""
    return [
        r
        for r in receipts
        if r.retirement_id == record.pk
        and r.provider_lease_id == record.provider_lease_id
        and r.lease_id == record.lease_id
    ]


def _by_attestation(record: Record, mine: list[ReceiptData], binding: _Binding) -> Proof | None:
    """The newest still-bound attestation on which this sandbox's id was typed
    (with a reason), or None."""
    attested = sorted(
        (
            r
            for r in mine
            if r.kind == ReceiptKind.OPERATOR_ATTESTED
            and r.payload.get("typed_sandbox_id") == record.provider_lease_id
            and (r.payload.get("reason") or "").strip()
        ),
        key=_order,
        reverse=True,
    )
    for r in attested:
        if binding.bound(r, "attestation"):
            return binding.yes("an admin attested that unsaved work may be discarded", r)
    return None


def _by_compare(mine: list[ReceiptData], binding: _Binding) -> Proof:
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


def _order(r: ReceiptData):
    return (r.confirmed_at, r.created_at or r.confirmed_at)


def approval_for(proof: Proof, approval: ReceiptData) -> bool:
    """An approval counts only for the proof receipt it approved, seen as it is now."""
    if not proof:
        return False
    # A replacement proof (resume_failed) has no receipt: its approval names it.
    if approval.payload.get("proof_receipt_id") != proof_key(proof):
        return False
    if proof.fingerprint is None:
        return True
    return not void_reason(approval.payload.get("fingerprint"), proof.fingerprint, "approval")


def has_approval(record: Record, proof: Proof, receipts: Iterable[ReceiptData]) -> bool:
    """Whether an approval among `receipts` was given for exactly this proof
    (docs/rules.md, proof: an approval is bound to the proof it approved)."""
    return any(
        r.kind == ReceiptKind.APPROVAL and r.retirement_id == record.pk and approval_for(proof, r)
        for r in receipts
    )
