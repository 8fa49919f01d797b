"""The proof rule on plain data (sandboxes/rules/proof.py, docs/rules.md, proof).

What proves a destroy, for this record and exactly this sandbox, and how a
proof is bound to what it saw. The database half (what the sandbox is now, the
gate under the row lock) is tested in tests/reconciler/test_proof_binding.py
and test_destroy_gate.py.

The destroy gate's mutations (issue 10 item 11), each made alone in the rule:
- `latest.payload.get("clean") is True` → `any(c.payload.get("clean") is True
  for c in compares)`: both "latest compare" tests fail;
- the same line → clean derived from empty added/changed/deleted when the flag
  is missing: the two "no clean flag" cases fail;
- the same line → truthiness: the "clean as 1" and "clean as a string" cases fail.
"""

import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from sandboxes.rules.codes import ReceiptKind, RetirementKind, SaveState
from sandboxes.rules.proof import (
    FINGERPRINT_FIELDS,
    REPLACEMENT,
    approval_for,
    has_approval,
    proof_from_receipts,
    proof_key,
    void_reason,
)

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


@dataclass(frozen=True)
class Record:
    pk: str = "record-1"
    kind: str = RetirementKind.ABANDONED_WARM
    lease_id: str = "lease-1"
    provider_lease_id: str = "sandbox-1"


RECORD = Record()
# What the sandbox is now; a receipt that saw the same is bound to it.
SEEN = {
    "lease_id": "lease-1",
    "provider": "daytona",
    "sandbox_id": "sandbox-1",
    "run_id": "run-1",
    "paperclip_receipt_id": "paperclip-1",
    "paperclip_receipt_at": "2026-11-30T10:00:00+00:00",
    "workspace_id": "workspace-1",
    "saved_at": "2026-11-30T09:00:00+00:00",
}


@dataclass(frozen=True)
class Receipt:
    kind: str
    payload: dict
    confirmed_at: datetime = NOW
    created_at: datetime | None = None
    pk: str = field(default_factory=lambda: str(uuid.uuid4()))
    retirement_id: str = RECORD.pk
    lease_id: str = RECORD.lease_id
    provider_lease_id: str = RECORD.provider_lease_id


@dataclass(frozen=True)
class Workspace:
    save_state: str = SaveState.SAVED
    final_checkpoint_at: datetime | None = NOW
    writer_run_id: str | None = None


def receipt(kind, payload, *, seconds=0, seen=SEEN, **fields) -> Receipt:
    """A receipt confirmed `seconds` after NOW that recorded `seen` (None: no fingerprint)."""
    at = NOW + timedelta(seconds=seconds)
    return Receipt(kind, {**payload, "fingerprint": seen}, confirmed_at=at, **fields)


CLEAN = {"clean": True, "added": [], "changed": [], "deleted": []}
DIRTY = {
    "clean": False,
    "added": [{"path": "notes.md", "sha256": "0" * 64, "size": 3}],
    "changed": [],
    "deleted": [],
}
ATTESTED = {"typed_sandbox_id": "sandbox-1", "reason": "scratch", "user": "admin"}


def compare(payload, **kwargs) -> Receipt:
    return receipt(ReceiptKind.SALVAGE_COMPARE, payload, **kwargs)


def export_of(compared: Receipt, **kwargs) -> Receipt:
    payload = {"verified": True, "compare_receipt_id": str(compared.pk), "files": []}
    return receipt(ReceiptKind.SALVAGE_EXPORT, payload, **kwargs)


def attestation(**kwargs) -> Receipt:
    return receipt(ReceiptKind.OPERATOR_ATTESTED, ATTESTED, **kwargs)


def approval(proof, *, seen=SEEN) -> Receipt:
    payload = {"user": "op", "reason": "ok", "proof_receipt_id": proof_key(proof)}
    return receipt(ReceiptKind.APPROVAL, payload, seen=seen)


def judge(*receipts, now=SEEN, record=RECORD, workspace=None):
    return proof_from_receipts(record, list(receipts), now, workspace=workspace)


# --- what proves a destroy --------------------------------------------------------------


def test_a_clean_compare_is_proof_and_the_proof_rests_on_it():
    clean = compare(CLEAN)
    proof = judge(clean)
    assert proof and proof.receipt is clean and proof.fingerprint == SEEN
    assert proof.reason == "the latest compare found nothing unsaved"
    assert proof_key(proof) == str(clean.pk)


def test_no_compare_is_no_proof():
    proof = judge()
    assert not proof and proof.reason == "no salvage compare has been recorded yet"
    assert proof_key(proof) == ""


def test_a_dirty_compare_after_a_clean_one_voids_the_proof():
    proof = judge(compare(CLEAN), compare(DIRTY, seconds=5))
    assert not proof
    assert proof.reason == "unsaved files found and no verified export of them yet"


def test_the_latest_compare_is_the_newest_confirmed_not_the_first_written():
    """Receipts can be written out of order; the newest confirmation decides."""
    dirty = compare(DIRTY, seconds=5, created_at=NOW)
    clean = compare(CLEAN, created_at=NOW + timedelta(seconds=10))  # written later
    assert not judge(dirty, clean)
    assert not judge(clean, dirty)


def test_a_clean_compare_after_a_dirty_one_is_proof():
    assert judge(compare(DIRTY), compare(CLEAN, seconds=5))


NOT_EXPLICIT = {
    "no clean flag, empty lists": {"added": [], "changed": [], "deleted": []},
    "no clean flag, no lists": {},
    "clean as a string": {"clean": "true", "added": [], "changed": [], "deleted": []},
    "clean as 1": {"clean": 1, "added": [], "changed": [], "deleted": []},
    "clean null": {"clean": None, "added": [], "changed": [], "deleted": []},
}


@pytest.mark.parametrize("case", sorted(NOT_EXPLICIT))
def test_a_compare_without_an_explicit_clean_flag_is_not_proof(case):
    assert not judge(compare(NOT_EXPLICIT[case]))


def test_a_compare_that_saw_nothing_is_not_proof():
    blind = compare({"clean": False, "root_not_found": True, "error": "workspace root not found"})
    proof = judge(blind)
    assert not proof and proof.reason.startswith("workspace root not found")


def test_a_verified_export_of_the_latest_compare_is_proof():
    dirty = compare(DIRTY)
    exported = export_of(dirty, seconds=1)
    proof = judge(dirty, exported)
    assert proof and proof.receipt is exported
    assert proof.reason == "every unsaved file was exported and verified"


def test_an_export_proves_only_verified_and_only_for_the_latest_compare():
    dirty = compare(DIRTY)
    unverified = replace(export_of(dirty), payload={**export_of(dirty).payload, "verified": 1})
    assert not judge(dirty, unverified)
    later = compare(DIRTY, seconds=5)
    assert not judge(dirty, export_of(dirty, seconds=1), later)
    assert judge(dirty, later, export_of(later, seconds=6))


def test_an_attestation_needs_this_sandbox_typed_and_a_reason():
    proof = judge(attestation())
    assert proof and proof.reason == "an admin attested that unsaved work may be discarded"
    other = receipt(ReceiptKind.OPERATOR_ATTESTED, {**ATTESTED, "typed_sandbox_id": "sandbox-2"})
    assert not judge(other)
    blank = receipt(ReceiptKind.OPERATOR_ATTESTED, {**ATTESTED, "reason": "  "})
    assert not judge(blank)


def test_receipts_of_another_record_sandbox_or_lease_prove_nothing():
    for elsewhere in (
        {"retirement_id": "record-2"},
        {"provider_lease_id": "sandbox-2"},
        {"lease_id": "lease-2"},
    ):
        assert not judge(compare(CLEAN, **elsewhere)), elsewhere
        assert not judge(attestation(**elsewhere)), elsewhere


# --- resume_failed: proved by its replacement -----------------------------------------

REPLACED = Record(kind=RetirementKind.RESUME_FAILED)
NOT_REPLACED = {
    "no workspace": (None, "the replaced lease names no workspace to re-check"),
    "saving again": (
        Workspace(save_state=SaveState.SAVING),
        "the workspace is no longer saved with a committed save",
    ),
    "no final checkpoint": (
        Workspace(final_checkpoint_at=None),
        "the workspace is no longer saved with a committed save",
    ),
    "a writer": (Workspace(writer_run_id="run-2"), "a writer holds the workspace"),
}


@pytest.mark.parametrize("case", sorted(NOT_REPLACED))
def test_resume_failed_is_proved_by_its_workspace_only(case):
    workspace, reason = NOT_REPLACED[case]
    # A clean compare or an attestation does not stand in for the replacement.
    proof = judge(compare(CLEAN), attestation(), record=REPLACED, workspace=workspace)
    assert not proof and proof.reason == reason


def test_a_saved_workspace_proves_resume_failed_and_its_approval_names_the_replacement():
    proof = judge(record=REPLACED, workspace=Workspace())
    assert proof and proof.receipt is None and proof.fingerprint == SEEN
    assert proof_key(proof) == REPLACEMENT
    assert has_approval(REPLACED, proof, [approval(proof)])


# --- proof is bound to what it saw ------------------------------------------------------


def proved_by(what: str, seen: dict, now: dict) -> list[Receipt]:
    """Receipts that prove by `what`, which saw `seen`; the sandbox is `now`."""
    if what == "compare":
        return [compare(CLEAN, seen=seen)]
    if what == "attestation":
        return [attestation(seen=seen)]
    # The compare the export rests on saw the sandbox as it is now: the export did not.
    dirty = compare(DIRTY, seen=now)
    return [dirty, export_of(dirty, seconds=1, seen=seen)]


@pytest.mark.parametrize("what", ["compare", "attestation", "export"])
@pytest.mark.parametrize(("name", "words"), FINGERPRINT_FIELDS)
def test_a_proof_is_void_once_what_it_saw_moved_on(name, words, what):
    assert judge(*proved_by(what, SEEN, SEEN))
    now = {**SEEN, name: "moved"}
    receipts = proved_by(what, SEEN, now)
    proof = judge(*receipts, now=now)
    assert not proof
    assert proof.void == proof.reason == f"proof void: {words} after the {what}"
    assert proof.void_receipt is receipts[-1]


def test_a_receipt_without_a_fingerprint_proves_nothing():
    proof = judge(compare(CLEAN, seen=None))
    assert not proof
    assert proof.void == "proof void: the compare recorded no fingerprint of what it saw"


def test_an_export_is_void_when_the_sandbox_moved_on_after_it():
    dirty = compare(DIRTY)
    now = {**SEEN, "saved_at": "2026-11-30T11:00:00+00:00"}
    proof = judge(dirty, export_of(dirty, seconds=1), now=now)
    assert proof.void == "proof void: the workspace was saved again after the compare"


def test_a_newer_attestation_still_bound_proves_when_an_older_one_is_void():
    old = attestation(seen={**SEEN, "run_id": "run-0"})
    assert judge(old, attestation(seconds=5))
    assert not judge(old)


def test_without_the_present_fingerprint_the_proof_is_not_bound():
    """Pages that only describe a record, and the chaos invariants' replay."""
    proof = proof_from_receipts(RECORD, [compare(CLEAN, seen=None)])
    assert proof and proof.fingerprint is None


def test_void_reason_names_the_first_field_that_moved():
    assert void_reason(SEEN, SEEN, "compare") == ""
    moved = {**SEEN, "run_id": "run-2", "saved_at": "later"}
    assert (
        void_reason(SEEN, moved, "export") == "proof void: the lease was resumed after the export"
    )


# --- an approval counts only for the proof it approved ----------------------------------


def test_an_approval_counts_only_for_the_proof_it_approved():
    """Approved on compare A; a later clean compare B is a new proof that needs its
    own approval, even though nothing moved."""
    first = compare(CLEAN)
    approved = approval(judge(first))
    proof = judge(first, compare(CLEAN, seconds=1), approved)
    assert proof and not has_approval(RECORD, proof, [approved])
    assert has_approval(RECORD, proof, [approved, approval(proof)])


def test_an_approval_of_an_older_fingerprint_does_not_count():
    proof = judge(compare(CLEAN))
    assert approval_for(proof, approval(proof))
    stale = approval(proof, seen={**SEEN, "saved_at": "2026-01-01T00:00:00+00:00"})
    assert not approval_for(proof, stale)


def test_an_approval_of_another_record_or_without_proof_does_not_count():
    proof = judge(compare(CLEAN))
    other = replace(approval(proof), retirement_id="record-2")
    assert not has_approval(RECORD, proof, [other])
    refused = judge(compare(DIRTY))
    assert not approval_for(refused, approval(proof))
