"""The destroy gate: the one function every destroy passes (docs/rules.md, proof).

`authorize_destroy` is asked under the record's row lock by
`steps.retire_sandbox`, the only caller of a provider destroy. It refuses
unless the lease is still a candidate of a kind that may be destroyed and still
names the sandbox about to be destroyed, no hold applies (judged from every
lease row naming that sandbox), the environment is not in observe mode, the proof stands for the
sandbox as it is now, manual mode has an approval for this proof, and a notice
for this proof has run out.
"""

from __future__ import annotations

import time

from sandboxes import audit
from sandboxes.models import AuditEvent, Receipt, Retirement
from sandboxes.models.choices import SHARING_STATUSES, RetirementMode, Stage
from sandboxes.proof import fingerprint_of, replaced_workspace
from sandboxes.providers.base import SandboxState, TransientProviderError
from sandboxes.rules.holds import STOP_ONLY_KINDS, compute_holds, window_opens
from sandboxes.rules.listing import LEASE_MOVED, Candidate
from sandboxes.rules.next_step import notice_on, notice_valid
from sandboxes.rules.proof import Proof, has_approval, proof_from_receipts, proof_key

from .candidates import sandbox_rows
from .records import iso


class DestroyRefused(Exception):
    """The proof rule (or a hold, the mode, or approval) forbids this destroy."""


class ProofVoid(DestroyRefused):
    """The proof no longer matches what the sandbox is now (the lease was resumed,
    a newer stop, a newer save): the record goes back to compare."""

    def __init__(self, proof: Proof):
        super().__init__(proof.void)
        self.proof = proof


def record_void(r: Retirement, proof: Proof) -> None:
    """Say once, in plain words, that a receipt stopped being proof and the record
    goes back to compare (docs/rules.md, proof). Call under the row lock."""
    receipt = proof.void_receipt
    if receipt is None:
        return
    if AuditEvent.objects.filter(
        action="retirement.proof_void", object_id=str(r.pk), after__receipt=str(receipt.pk)
    ).exists():
        return
    audit.record(
        actor=None,
        action="retirement.proof_void",
        obj=r,
        reason=proof.void,
        before={"stage": r.stage, "fingerprint": receipt.payload.get("fingerprint")},
        after={
            "stage": Stage.COMPARING,
            "receipt": str(receipt.pk),
            "receipt_kind": receipt.kind,
            "fingerprint": proof.fingerprint,
        },
    )


def authorize_destroy(r: Retirement, cand: Candidate | None, now) -> str:
    """The gate every destroy passes: returns the proof's reason or raises DestroyRefused.
    Call under the record's row lock."""
    if cand is None or cand.kind is None:
        raise DestroyRefused("the sandbox is no longer a candidate")
    if cand.kind in STOP_ONLY_KINDS or r.kind in STOP_ONLY_KINDS:
        raise DestroyRefused(f"{cand.kind} allows a stop only, never a destroy")
    _judge_the_sandbox(r, cand)
    holds = compute_holds(
        cand.facts, cand.kind, operator_hold_reason=r.operator_hold_reason, now=now
    )
    if holds:
        opens = window_opens(cand.facts, holds, now)
        when = f" (the retirement window opens {iso(opens)})" if opens else ""
        raise DestroyRefused(f"held: {', '.join(holds)}{when}")
    env = r.environment
    if env.retirement_mode == RetirementMode.OBSERVE:
        raise DestroyRefused("the environment is in observe mode")
    receipts = list(Receipt.objects.proof_of([r]))
    # Proof is bound to what it saw: recomputed here, under the lock (docs/rules.md, proof).
    proof = proof_from_receipts(r, receipts, fingerprint_of(r), workspace=replaced_workspace(r))
    if not proof:
        if proof.void:
            raise ProofVoid(proof)
        raise DestroyRefused(f"no proof: {proof.reason}")
    if env.retirement_mode == RetirementMode.MANUAL and not has_approval(r, proof, receipts):
        raise DestroyRefused("manual mode: no operator approval recorded")
    if notice_on(env.retirement_mode, env.notice_period):
        if not notice_valid(r.retire_after, r.notice_proof, proof_key(proof)):
            raise DestroyRefused("notice period: no notice was given for this proof")
        if r.retire_after is None or r.retire_after > now:
            raise DestroyRefused(f"notice period: not before {iso(r.retire_after)}")
    return proof.reason


def _judge_the_sandbox(r: Retirement, cand: Candidate) -> None:
    """The destroy targets the record's sandbox: judge that one. The candidate's
    facts describe the sandbox its lease names now, so they count only while it
    is the same; and every lease row naming the record's sandbox is read again,
    so another lease using it holds it whatever the record's lease says."""
    if not cand.names(r.provider, r.provider_lease_id):
        raise DestroyRefused(LEASE_MOVED)
    rows = sandbox_rows(r.provider, r.provider_lease_id)
    if r.lease_id not in rows:
        raise DestroyRefused(LEASE_MOVED)
    sharing = sorted(
        str(pk) for pk, status in rows.items() if pk != r.lease_id and status in SHARING_STATUSES
    )
    if sharing:
        raise DestroyRefused(f"held: sandbox_shared (lease {', '.join(sharing)} uses the sandbox)")


def await_destroy(provider, sandbox_id: str, info):
    """Read until a `destroying` sandbox is gone (or comes back), inside the step budget."""
    from django.conf import settings

    budget = float(getattr(provider, "budget_seconds", 0) or settings.PROVIDER_STEP_BUDGET_SECONDS)
    interval = float(getattr(provider, "poll_interval", 1.0) or 1.0)
    deadline = time.monotonic() + budget
    while info.state == SandboxState.DESTROYING:
        if time.monotonic() + interval > deadline:
            raise TransientProviderError(
                f"{sandbox_id} still destroying after {budget:g}s", sandbox_id=sandbox_id
            )
        time.sleep(interval)
        info = provider.get(sandbox_id)
    return info
