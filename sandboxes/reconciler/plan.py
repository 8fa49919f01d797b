"""The planner: under the record's row lock, re-judge the lease, refresh its
holds and pick the next step (docs/architecture.md, step 6).

What comes next is decided by `sandboxes/rules/next_step.py:next_step`, the
pure decision the policy preview shares; this module loads what it needs under
the lock and turns its answer, a `Next`, into a wait, a close, or a `Plan` for
a step.
The next step is derived from the record's receipts, never from memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, assert_never

from django.utils import timezone

from sandboxes import audit
from sandboxes.models import Environment, EnvironmentLease, Receipt, Retirement
from sandboxes.models.choices import HoldCode, ReceiptKind, Stage
from sandboxes.notifications import events as notify
from sandboxes.proof import fingerprint_of, replaced_workspace
from sandboxes.rules.holds import blocking_holds, compute_holds, explain, window_opens
from sandboxes.rules.listing import LEASE_MOVED, NOT_A_CANDIDATE, Candidate
from sandboxes.rules.next_step import Next, next_step, situation_of
from sandboxes.rules.proof import Proof, proof_from_receipts, proof_key, void_reason

from .candidates import judge_lease_locked
from .claims import fenced
from .gate import record_void
from .predicates import stop_refusals
from .records import close_record, wait_record
from .steps import Action, Plan

if TYPE_CHECKING:
    from .worker import Worker


def workspace_root(lease: EnvironmentLease, environment: Environment) -> str:
    return (lease.metadata or {}).get("remoteCwd") or environment.workspace_root or "workspace"


def _latest_compare(receipts: list[Receipt]) -> Receipt | None:
    compares = [x for x in receipts if x.kind == ReceiptKind.SALVAGE_COMPARE]
    return compares[-1] if compares else None


def _refresh_holds(r: Retirement, cand: Candidate | None, now) -> list[str]:
    if cand is None or cand.kind is None:
        return []
    r.kind = cand.kind
    r.holds = compute_holds(
        cand.facts, cand.kind, operator_hold_reason=r.operator_hold_reason, now=now
    )
    refusal = ""
    if HoldCode.NO_STOP_RECEIPT in r.holds:
        refusal = stop_refusals([cand.lease_id]).get(cand.lease_id, "")
    r.hold_reasons = explain(r.holds, cand.facts, r.hold_reasons, refusal)
    return blocking_holds(r.holds, cand.kind)


def _give_notice(r: Retirement, proof_key: str, now) -> None:
    """Auto mode with a notice period: announce the retirement and wait for it.
    The destroy comes on a later pass that re-checks everything (authorize_destroy)."""
    before = {"stage": r.stage}
    r.retire_after = now + r.environment.notice_period
    r.notice_proof = proof_key
    wait_record(r, Stage.NOTICED, next_attempt_at=r.retire_after)
    audit.record(
        actor=None,
        action="retirement.noticed",
        obj=r,
        reason=f"notice period: retired after {r.retire_after.isoformat()} unless held",
        before=before,
        after={"stage": r.stage, "retire_after": r.retire_after.isoformat()},
    )
    notify.notice(r)


def _wait_for_cap(r: Retirement, started: bool, base: dict, now) -> Plan | None:
    """The blast-radius cap is reached for this pass: the record waits for the next
    pass, after the sandbox the console started for it is stopped again
    (docs/rules.md, what happens next)."""
    if started:
        r.save()
        return Plan(Action.STOP_BEFORE_WAIT, **base)
    wait_record(r, r.stage, next_attempt_at=now)
    return None


def plan_step(retirement_id, attempt_id, worker: Worker) -> Plan | None:
    """Under the row lock: re-check the predicate and holds, and decide the next step.
    Returns None when the record now waits or is closed."""
    now = timezone.now()
    with fenced(retirement_id, attempt_id) as r:
        if not r.is_open:
            return None
        env = r.environment
        cand = judge_lease_locked(r.lease_id)
        started = r.started_for_salvage
        base: dict[str, Any] = {
            "retirement_id": r.pk,
            "environment": env,
            "sandbox_id": r.provider_lease_id,
            "provider": r.provider,
        }

        if cand is None or cand.kind is None:
            if started:
                return Plan(Action.STOP_BEFORE_WAIT, **base)
            _dismiss(r, now)
            return None
        if not cand.names(r.provider, r.provider_lease_id):
            # The lease row now describes another sandbox: its facts say nothing
            # about this one, which is judged by its own newest row on a later
            # listing; the moved-to sandbox gets a record of its own.
            if started:
                return Plan(Action.STOP_BEFORE_WAIT, **base)
            close_record(r, Stage.DISMISSED, LEASE_MOVED, now)
            return None

        blocking = _refresh_holds(r, cand, now)
        receipts = list(Receipt.objects.proof_of([r]))
        fingerprint = fingerprint_of(r)
        proof = proof_from_receipts(r, receipts, fingerprint, workspace=replaced_workspace(r))
        situation = situation_of(
            r,
            kind=r.kind,
            blocking=blocking,
            mode=env.retirement_mode,
            notice=env.notice_period,
            proof=proof,
            receipts=receipts,
            under_cap=worker.under_cap(env),
        )
        step = next_step(situation, now)
        if step is Next.SALVAGE:
            return _plan_salvage(r, base, proof, receipts, fingerprint)
        if step is Next.HOLD and (opens := window_opens(cand.facts, blocking, now)):
            # The retirement window alone: wait for its opening, notice kept.
            wait_record(r, Stage.HELD, next_attempt_at=opens, keep_notice=True)
            return None
        return _follow(r, step, base, proof_key(proof), now)


def _dismiss(r: Retirement, now) -> None:
    close_record(r, Stage.DISMISSED, NOT_A_CANDIDATE, now)


def _follow(r: Retirement, step: Next, base: dict, proof_key: str, now) -> Plan | None:
    """Every answer of next_step but salvage (`_plan_salvage`): a wait, or a plan for a step."""
    match step:
        case Next.STOP_BEFORE_WAIT:
            # A sandbox the console started for salvage is stopped before its record
            # waits, in every mode: observe forbids starts and destroys, and a stop
            # only puts back the state the console found (docs/rules.md, holds).
            r.save()
            return Plan(Action.STOP_BEFORE_WAIT, **base)
        case Next.HOLD:
            wait_record(r, Stage.HELD)
            return None
        case Next.OBSERVE:
            # Observe: list and explain only; never a provider call beyond reads.
            wait_record(r, Stage.LISTED)
            return None
        case Next.STOP_ONLY:
            r.save()
            return Plan(Action.STOP_ONLY, **base)
        case Next.AWAIT_APPROVAL:
            entering = r.stage != Stage.AWAITING_APPROVAL
            wait_record(r, Stage.AWAITING_APPROVAL)
            if entering:
                notify.awaiting_approval(r, proof_key)
            return None
        case Next.GIVE_NOTICE:
            _give_notice(r, proof_key, now)
            return None
        case Next.WAIT_NOTICE:
            wait_record(r, Stage.NOTICED, next_attempt_at=r.retire_after)
            return None
        case Next.WAIT_CAP:
            return _wait_for_cap(r, r.started_for_salvage, base, now)
        case Next.RETIRE | Next.UNPROVED:
            # UNPROVED: resume_failed is proved by its replacement, never by a
            # compare (seed 004): the sandbox is not started. Without that proof
            # the gate refuses, and the record retries and then needs attention.
            r.stage = Stage.RETIRING
            r.save()
            return Plan(Action.RETIRE, **base)
        case Next.SALVAGE:
            raise ValueError("salvage is planned by _plan_salvage, with the proof's receipts")
        case _:
            assert_never(step)


def _exportable(latest: Receipt | None, receipts: list[Receipt], fingerprint: dict) -> bool:
    """The latest compare found unsaved files, saw the workspace, was not made
    stale by a failed export, and still matches the sandbox: export them."""
    if latest is None:
        return False
    stale = any(
        x.kind == ReceiptKind.SALVAGE_EXPORT
        and x.payload.get("stale")
        and x.payload.get("compare_receipt_id") == str(latest.pk)
        for x in receipts
    )
    return (
        latest.payload.get("clean") is False
        and not latest.payload.get("root_not_found")
        and not stale
        and not void_reason(latest.payload.get("fingerprint"), fingerprint, "compare")
    )


def _plan_salvage(
    r: Retirement, base: dict, proof: Proof, receipts: list[Receipt], fingerprint: dict
) -> Plan:
    """Next.SALVAGE: compare (and export) to earn the proof."""
    if proof.void:
        # What the proof saw has moved on: compare again (below), and say so.
        record_void(r, proof)
    base["fingerprint"] = fingerprint
    lease = r.lease
    root = workspace_root(lease, r.environment)
    latest = _latest_compare(receipts)
    if _exportable(latest, receipts, fingerprint) and latest is not None:
        r.stage = Stage.EXPORTING
        r.save()
        files = {f["path"]: f for f in latest.payload["added"] + latest.payload["changed"]}
        return Plan(
            Action.EXPORT,
            **base,
            root=root,
            export_files=files,
            deleted=list(latest.payload.get("deleted", [])),
            compare_receipt_id=str(latest.pk),
        )
    r.stage = Stage.COMPARING
    r.save()
    workspace = lease.execution_workspace
    manifest = (workspace.saved_manifest or {}) if workspace is not None else {}
    return Plan(Action.COMPARE, **base, root=root, manifest=manifest)
