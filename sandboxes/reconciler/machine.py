"""The salvage-then-retire state machine (DOMAIN §2.3, §2.4).

A worker claims one due record at a time (SELECT … FOR UPDATE SKIP LOCKED
LIMIT 1, then a fenced claim: attempt_id + claimed_until), and advances it one
step at a time:

    plan (transaction, row lock: re-check predicate and holds, pick the step)
    → provider I/O (no transaction open)
    → record (transaction, fenced on the claim: receipt + stage)

The next step is derived from the record's receipts, never from memory, so a
worker that dies anywhere is continued by the next one from the last receipt.
Every destroy goes through `retire_sandbox`, which asks `authorize_destroy`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from sandboxes import audit
from sandboxes.models import (
    Attachment,
    AuditEvent,
    Environment,
    EnvironmentLease,
    Receipt,
    Retirement,
)
from sandboxes.models.choices import (
    RECEIPT_SCHEMAS,
    STAGES_CLOSED,
    CleanupStatus,
    LeaseStatus,
    ReceiptKind,
    RetirementKind,
    RetirementMode,
    Stage,
    TerminationState,
)
from sandboxes.notifications import events as notify
from sandboxes.proof import (
    PROOF_KINDS,
    REPLACEMENT,
    Proof,
    fingerprint_of,
    has_approval,
    proof_from_receipts,
    void_reason,
)
from sandboxes.providers.base import (
    Confirmation,
    ProviderError,
    RootNotFound,
    SandboxState,
    TransientProviderError,
)
from sandboxes.providers.registry import get_provider

from . import decide, salvage
from .candidates import Candidate, judge_lease_locked
from .holds import STOP_ONLY_KINDS, blocking_holds, compute_holds, explain

log = logging.getLogger(__name__)

CLAIM_SECONDS = 15 * 60
BACKOFF_FIRST = 30
BACKOFF_CAP = 30 * 60
NEEDS_ATTENTION_AFTER = 5
# Stages a worker may pick up when next_attempt_at is due. `held` records are
# released by the listing sync once their holds clear.
WORKABLE_STAGES = (
    Stage.LISTED,
    Stage.COMPARING,
    Stage.EXPORTING,
    Stage.RETIRING,
    Stage.AWAITING_APPROVAL,
    Stage.NOTICED,
    Stage.FAILED,
)


# A dropped or broken database connection (server restart, pg_terminate_backend,
# network cut). Nothing half-written survives it: each fenced write is one
# transaction. The record is retried; the worker reconnects and goes on.
DB_LOST = (OperationalError, InterfaceError)


def reset_connection() -> None:
    """Drop this thread's database connection so the next query reconnects."""
    try:
        connection.close()
    except Exception as exc:  # a dead socket may complain on close; it is gone either way
        log.debug("closing a broken database connection: %s", exc)


class ClaimLost(Exception):
    """Another worker owns the record now (our claim expired); drop our result."""


class DestroyRefused(Exception):
    """The proof rule (or a hold, the mode, or approval) forbids this destroy."""


class ProofVoid(DestroyRefused):
    """The proof no longer matches what the sandbox is now (the lease was resumed,
    a newer stop, a newer save): the record goes back to compare."""

    def __init__(self, proof: Proof):
        super().__init__(proof.void)
        self.proof = proof


def backoff(attempts: int) -> timedelta:
    """30 s, doubling, capped at 30 min; once 5 attempts have failed, every 30 min
    (DOMAIN §2.4), the same point at which needs_attention is set."""
    if attempts >= NEEDS_ATTENTION_AFTER:
        return timedelta(seconds=BACKOFF_CAP)
    return timedelta(seconds=min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** max(0, attempts - 1)))


def checkpoint(name: str) -> None:
    """A named point between steps. Tests replace it to simulate a worker dying."""


class ProviderMismatch(ProviderError):
    """The lease names another provider than its environment's settings: calling
    the environment's provider would act on the wrong sandbox (or none)."""


def default_provider_for(environment: Environment, provider_name: str = ""):
    """The client for a lease's provider with its environment's API settings."""
    return get_provider(
        provider_name or environment.provider,
        api_url=environment.api_url or None,
        api_key_env=environment.api_key_env or "DAYTONA_API_KEY",
        toolbox_hosts=environment.toolbox_hosts,
    )


@dataclass
class Worker:
    """One reconciler worker's pass-scoped state."""

    name: str = ""
    provider_for: Callable | None = None  # None: default_provider_for
    retired_by_env: Counter = field(default_factory=Counter)
    cap_by_env: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    advanced: int = 0
    retired: int = 0
    failed: int = 0
    _providers: dict = field(default_factory=dict)

    def provider(self, environment: Environment, provider_name: str):
        """The client for the record's (the lease's) provider. Refuses when the
        environment's provider settings are for another provider."""
        if provider_name != environment.provider:
            raise ProviderMismatch(
                f"the lease's provider {provider_name!r} differs from its environment's "
                f"provider {environment.provider!r}: refusing every provider call"
            )
        key = (environment.pk, provider_name)
        if key not in self._providers:
            if self.provider_for is not None:
                self._providers[key] = self.provider_for(environment)
            else:
                self._providers[key] = default_provider_for(environment, provider_name)
        return self._providers[key]

    def provider_of(self, plan: Plan):
        # A plan built without a provider (tests) means the environment's.
        return self.provider(plan.environment, plan.provider or plan.environment.provider)

    def under_cap(self, environment: Environment) -> bool:
        return self.retired_by_env[environment.pk] < environment.max_retirements_per_pass


# --- claims -------------------------------------------------------------------


def due_filter(now) -> Q:
    """Due work, plus held records still flagged as started by a dead worker: the
    sandbox they started must be stopped before they wait."""
    return Q(stage__in=WORKABLE_STAGES, next_attempt_at__lte=now) | Q(
        stage=Stage.HELD, started_for_salvage=True
    )


@dataclass(frozen=True)
class Claim:
    retirement_id: uuid.UUID
    attempt_id: uuid.UUID
    lease_id: uuid.UUID | None


def claim_next(*, environment_id=None, exclude=(), now=None) -> Claim | None:
    """Claim ONE due, unclaimed record in a short transaction
    (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1, then the fenced claim write).

    One at a time, so concurrent workers interleave over the due records and a
    worker that dies strands at most the one record it was working on."""
    now = now or timezone.now()
    with transaction.atomic():
        qs = Retirement.objects.filter(due_filter(now)).exclude(claimed_until__gt=now)
        if environment_id is not None:
            qs = qs.filter(environment_id=environment_id)
        if exclude:
            qs = qs.exclude(pk__in=list(exclude))
        row = (
            qs.select_for_update(skip_locked=True)
            .order_by(F("next_attempt_at").asc(nulls_first=True), "pk")
            .values_list("pk", "lease_id")
            .first()
        )
        if row is None:
            return None
        attempt = uuid.uuid4()
        Retirement.objects.filter(pk=row[0]).update(
            attempt_id=attempt, claimed_until=now + timedelta(seconds=CLAIM_SECONDS)
        )
    return Claim(retirement_id=row[0], attempt_id=attempt, lease_id=row[1])


@contextmanager
def fenced(retirement_id, attempt_id):
    """A transaction holding the record's row lock, only while our claim holds."""
    with transaction.atomic():
        r = (
            Retirement.objects.select_for_update()
            .filter(pk=retirement_id, attempt_id=attempt_id, claimed_until__gt=timezone.now())
            .select_related("environment", "lease")
            .first()
        )
        if r is None:
            raise ClaimLost(f"claim {attempt_id} on {retirement_id} no longer holds")
        yield r


def release_claim(retirement_id, attempt_id) -> None:
    Retirement.objects.filter(pk=retirement_id, attempt_id=attempt_id).update(
        attempt_id=None, claimed_until=None
    )


# --- plans ----------------------------------------------------------------------


@dataclass
class Plan:
    action: str  # stop_only | stop_before_wait | compare | export | retire
    retirement_id: uuid.UUID
    environment: Environment
    sandbox_id: str
    root: str = ""
    manifest: dict = field(default_factory=dict)
    export_files: dict = field(default_factory=dict)
    deleted: list = field(default_factory=list)
    compare_receipt_id: str = ""
    provider: str = ""  # the record's (the lease's) provider; "": the environment's
    # What the sandbox was when the step was planned (under the row lock); the
    # step's receipt records it, and the destroy gate compares it with the present.
    fingerprint: dict = field(default_factory=dict)


def workspace_root(lease: EnvironmentLease, environment: Environment) -> str:
    return (lease.metadata or {}).get("remoteCwd") or environment.workspace_root or "workspace"


def _record_receipts(r: Retirement) -> list[Receipt]:
    return list(
        Receipt.objects.filter(
            retirement=r, kind__in=(*PROOF_KINDS, ReceiptKind.APPROVAL)
        ).order_by("confirmed_at", "created_at")
    )


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
    r.hold_reasons = explain(r.holds)
    return blocking_holds(r.holds, cand.kind)


def _close(r: Retirement, stage: str, reason: str, now) -> None:
    before = {"stage": r.stage}
    r.stage = stage
    r.closed_at = now
    r.closed_reason = reason
    r.next_attempt_at = None
    r.save()
    audit.record(
        actor=None,
        action=f"retirement.{stage}",
        obj=r,
        reason=reason,
        before=before,
        after={"stage": stage, "kind": r.kind},
    )


def _record_void(r: Retirement, proof: Proof) -> None:
    """Say once, in plain words, that a receipt stopped being proof and the record
    goes back to compare (DOMAIN §2.3). Call under the row lock."""
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


def _wait(r: Retirement, stage: str, next_attempt_at=None) -> None:
    r.stage = stage
    r.next_attempt_at = next_attempt_at
    if stage == Stage.HELD:
        # A hold stops a running notice: once it clears, the owner hears again.
        r.retire_after = None
        r.notice_proof = ""
    r.save()


def proof_key_of(proof) -> str:
    """The receipt a proof rests on: an approval or a notice is bound to it."""
    if not proof:
        return ""
    # resume_failed's proof is its replacement, not a receipt (seed 004).
    return str(proof.receipt.pk) if proof.receipt is not None else REPLACEMENT


def _give_notice(r: Retirement, proof_key: str, now) -> None:
    """Auto mode with a notice period: announce the retirement and wait for it.
    The destroy comes on a later pass that re-checks everything (authorize_destroy)."""
    before = {"stage": r.stage}
    r.retire_after = now + r.environment.notice_period
    r.notice_proof = proof_key
    _wait(r, Stage.NOTICED, next_attempt_at=r.retire_after)
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
    pass, after the sandbox the console started for it is stopped again (§2.3)."""
    if started:
        r.save()
        return Plan("stop_before_wait", **base)
    _wait(r, r.stage, next_attempt_at=now)
    return None


def plan_step(retirement_id, attempt_id, worker: Worker) -> Plan | None:
    """Under the row lock: re-check the predicate and holds, and decide the next step.
    Returns None when the record now waits or is closed."""
    now = timezone.now()
    with fenced(retirement_id, attempt_id) as r:
        if r.stage in STAGES_CLOSED:
            return None
        env = r.environment
        cand = judge_lease_locked(r.lease_id)
        started = r.started_for_salvage
        base = {
            "retirement_id": r.pk,
            "environment": env,
            "sandbox_id": r.provider_lease_id,
            "provider": r.provider,
        }

        if cand is None or cand.kind is None:
            if started:
                return Plan("stop_before_wait", **base)
            _close(
                r, Stage.DISMISSED, "no longer a candidate (the predicate stopped matching)", now
            )
            return None

        blocking = _refresh_holds(r, cand, now)
        receipts = _record_receipts(r)
        fingerprint = fingerprint_of(r)
        proof = proof_from_receipts(r, receipts, fingerprint)
        proof_key = proof_key_of(proof)
        step = decide.next_step(
            decide.Situation(
                kind=r.kind,
                blocking=tuple(blocking),
                mode=env.retirement_mode,
                started=started,
                proof=bool(proof),
                approved=has_approval(r, proof, receipts),
                notice=env.notice_period,
                notice_valid=decide.notice_valid(r.retire_after, r.notice_proof, proof_key),
                retire_after=r.retire_after,
                under_cap=worker.under_cap(env),
            ),
            now,
        )
        # A sandbox the console started for salvage is stopped before its record
        # waits, in every mode: observe forbids starts and destroys, and a stop
        # only puts back the state the console found (§2.3).
        if step == decide.STOP_BEFORE_WAIT:
            r.save()
            return Plan("stop_before_wait", **base)
        if step == decide.HOLD:
            _wait(r, Stage.HELD)
            return None
        if step == decide.OBSERVE:
            # Observe: list and explain only; never a provider call beyond reads.
            _wait(r, Stage.LISTED)
            return None
        if step == decide.STOP_ONLY:
            r.save()
            return Plan("stop_only", **base)
        if step == decide.AWAIT_APPROVAL:
            entering = r.stage != Stage.AWAITING_APPROVAL
            _wait(r, Stage.AWAITING_APPROVAL)
            if entering:
                notify.awaiting_approval(r, proof_key)
            return None
        if step == decide.GIVE_NOTICE:
            _give_notice(r, proof_key, now)
            return None
        if step == decide.WAIT_NOTICE:
            _wait(r, Stage.NOTICED, next_attempt_at=r.retire_after)
            return None
        if step == decide.WAIT_CAP:
            return _wait_for_cap(r, started, base, now)
        if step == decide.RETIRE:
            r.stage = Stage.RETIRING
            r.save()
            return Plan("retire", **base)

        if step == decide.UNPROVED:
            # Proved by its replacement, never by a compare (seed 004): the
            # sandbox is not started. Without that proof the gate refuses, and
            # the record retries and then needs attention.
            r.stage = Stage.RETIRING
            r.save()
            return Plan("retire", **base)

        # decide.SALVAGE: compare (and export) to earn the proof.
        if proof.void:
            # What the proof saw has moved on: compare again (below), and say so.
            _record_void(r, proof)
        base["fingerprint"] = fingerprint
        lease = r.lease
        root = workspace_root(lease, env)
        latest = _latest_compare(receipts)
        stale = latest is not None and any(
            x.kind == ReceiptKind.SALVAGE_EXPORT
            and x.payload.get("stale")
            and x.payload.get("compare_receipt_id") == str(latest.pk)
            for x in receipts
        )
        exportable = (
            latest is not None
            and latest.payload.get("clean") is False
            and not latest.payload.get("root_not_found")
            and not stale
            and not void_reason(latest.payload.get("fingerprint"), fingerprint, "compare")
        )
        if exportable and latest is not None:
            r.stage = Stage.EXPORTING
            r.save()
            files = {f["path"]: f for f in latest.payload["added"] + latest.payload["changed"]}
            return Plan(
                "export",
                **base,
                root=root,
                export_files=files,
                deleted=list(latest.payload.get("deleted", [])),
                compare_receipt_id=str(latest.pk),
            )
        r.stage = Stage.COMPARING
        r.save()
        manifest: dict = {}
        if lease.execution_workspace_id:
            manifest = lease.execution_workspace.saved_manifest or {}
        return Plan("compare", **base, root=root, manifest=manifest)


# --- receipts ---------------------------------------------------------------------


def _receipt(r: Retirement, kind: str, *, request_id: str, payload: dict, state=None, at=None):
    return Receipt.objects.create(
        kind=kind,
        lease_id=r.lease_id,
        run_id=r.lease.heartbeat_run_id,
        retirement=r,
        provider_lease_id=r.provider_lease_id,
        state=state,
        schema=RECEIPT_SCHEMAS.get(kind, ""),
        confirmed_at=at or timezone.now(),
        request_id=request_id,
        payload=payload,
        actor="system",
    )


def _stop_receipts(r: Retirement, conf: Confirmation, *, retain: bool) -> None:
    payload = conf.as_payload() | {"by": "console"}
    _receipt(
        r,
        ReceiptKind.TERMINATION,
        request_id=conf.request_id,
        payload=payload,
        state=TerminationState.STOPPED,
        at=conf.confirmed_at,
    )
    if retain:
        _receipt(
            r,
            ReceiptKind.STOP_AND_RETAIN,
            request_id=conf.request_id,
            payload=payload,
            state=TerminationState.STOPPED,
            at=conf.confirmed_at,
        )


def _close_destroyed(
    r: Retirement, conf: Confirmation, *, kind: str, payload: dict, stage: str, reason: str, now
) -> None:
    """The provider confirmed the sandbox is gone: its receipt, the lease expired and
    the record closed, together (call inside the fenced transaction)."""
    _receipt(
        r,
        kind,
        request_id=conf.request_id,
        payload=conf.as_payload() | payload,
        state=TerminationState.DESTROYED,
        at=conf.confirmed_at,
    )
    lease = EnvironmentLease.objects.select_for_update().get(pk=r.lease_id)
    lease.status = LeaseStatus.EXPIRED
    lease.cleanup_status = CleanupStatus.SUCCESS
    lease.save(update_fields=["status", "cleanup_status", "updated_at"])
    _succeeded(r)
    r.started_for_salvage = False
    r.provider_state = str(SandboxState.DESTROYED)
    r.provider_state_at = conf.confirmed_at
    _close(r, stage, reason, now)


def _succeeded(r: Retirement) -> None:
    r.attempts = 0
    r.needs_attention = False
    r.last_error = ""
    r.failing_since = None


# --- steps --------------------------------------------------------------------------


CORRECTED_REASON = "stopped after an unsuccessful run"


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def _stop(provider, sandbox_id: str) -> Confirmation | None:
    """Stop; a sandbox already gone needs no stop."""
    info = provider.get(sandbox_id)
    if info.state == SandboxState.DESTROYED:
        return None
    return provider.stop(sandbox_id)


def do_stop_only(plan: Plan, attempt_id, worker: Worker) -> None:
    """Stop, confirm, receipt, lease → released (or the release rule's status). Never destroys."""
    provider = worker.provider_of(plan)
    conf = _stop(provider, plan.sandbox_id)
    checkpoint("stop_only:after_stop")
    if conf is None:
        _close_gone(plan, attempt_id, _gone(provider, plan.sandbox_id))
        return
    now = timezone.now()
    with fenced(plan.retirement_id, attempt_id) as r:
        lease = EnvironmentLease.objects.select_for_update().get(pk=r.lease_id)
        _stop_receipts(r, conf, retain=True)
        # The console's own act on the mirrored lease (DOMAIN §2.1): the sandbox
        # is stopped and kept, so the lease is `released`. The disposition
        # Paperclip reported stays as evidence, and the source time is left
        # alone, so a later report from Paperclip still wins. A retry on the same
        # workspace can still resume it; a later pass judges it afresh.
        before = {"status": lease.status, "released_at": _iso(lease.released_at)}
        lease.status = LeaseStatus.RELEASED
        lease.released_at = lease.released_at or conf.confirmed_at
        lease.save(update_fields=["status", "released_at", "updated_at"])
        audit.record(
            actor=None,
            action="lease.stopped_and_retained",
            obj=lease,
            reason=f"the console stopped and retained the sandbox ({r.kind})",
            before=before,
            after={"status": lease.status, "released_at": _iso(lease.released_at)},
        )
        _succeeded(r)
        r.started_for_salvage = False
        r.provider_state = str(conf.state)
        r.provider_state_at = conf.confirmed_at
        if r.kind == RetirementKind.STOP_AFTER_UNSUCCESSFUL_RUN:
            # A correction, not a retirement: done once the stop is confirmed.
            _close(r, Stage.CORRECTED, CORRECTED_REASON, now)
            notify.correction_stopped(r)
            return
        # The stopped sandbox is judged afresh on a later pass (seed 001).
        _wait(r, Stage.LISTED, next_attempt_at=now)
        audit.record(
            actor=None,
            action="retirement.stopped",
            obj=r,
            reason=f"stop-only step for {r.kind}",
            after={"lease_status": lease.status, "disposition": lease.disposition},
        )


def do_stop_before_wait(plan: Plan, attempt_id, worker: Worker) -> None:
    conf = _stop(worker.provider_of(plan), plan.sandbox_id)
    with fenced(plan.retirement_id, attempt_id) as r:
        if conf is not None:
            _stop_receipts(r, conf, retain=False)
            r.provider_state = str(conf.state)
            r.provider_state_at = conf.confirmed_at
        r.started_for_salvage = False
        r.save()


def _mark_started(retirement_id, attempt_id) -> None:
    with fenced(retirement_id, attempt_id) as r:
        r.started_for_salvage = True
        r.save(update_fields=["started_for_salvage", "updated_at"])


def _gone(provider, sandbox_id: str) -> Confirmation:
    """A read found the sandbox destroyed: the confirmation that read gives."""
    return Confirmation(
        sandbox_id=sandbox_id,
        state=SandboxState.DESTROYED,
        confirmed_at=timezone.now(),
        request_id=uuid.uuid4().hex,
        operation="get",
        provider=getattr(provider, "name", ""),
    )


def _close_gone(plan: Plan, attempt_id, conf: Confirmation) -> None:
    """The sandbox is already gone at the provider (a read says so): record that
    once - a termination receipt `destroyed`, lease → expired with cleanup
    success - and dismiss the record (we destroyed nothing). The lease is no
    candidate any more, so later passes do not list the sandbox again."""
    now = timezone.now()
    with fenced(plan.retirement_id, attempt_id) as r:
        _close_destroyed(
            r,
            conf,
            kind=ReceiptKind.TERMINATION,
            payload={"by": "console", "found": "already gone"},
            stage=Stage.DISMISSED,
            reason="already gone at the provider",
            now=now,
        )


def _ensure_started(plan: Plan, attempt_id, provider) -> Confirmation | None:
    """Start the sandbox for file access. Returns None when it is running, or the
    read's confirmation when it is gone. The flag is written before the start so
    a crash still leaves someone to stop it."""
    info = provider.get(plan.sandbox_id)
    if info.state == SandboxState.DESTROYED:
        return _gone(provider, plan.sandbox_id)
    if info.state != SandboxState.STARTED:
        _mark_started(plan.retirement_id, attempt_id)
        provider.start(plan.sandbox_id)
    return None


def do_compare(plan: Plan, attempt_id, worker: Worker) -> None:
    provider = worker.provider_of(plan)
    gone = _ensure_started(plan, attempt_id, provider)
    if gone is not None:
        _close_gone(plan, attempt_id, gone)
        return
    try:
        digests = provider.hash_files(plan.sandbox_id, plan.root)
    except RootNotFound:
        digests = None
    blind = salvage.blind_spot(digests, plan.manifest, plan.root)
    if blind:
        # It saw nothing it can vouch for: a receipt that says so, no proof, and a
        # failure so the record retries and, after 5 attempts, needs attention.
        with fenced(plan.retirement_id, attempt_id) as r:
            _receipt(
                r,
                ReceiptKind.SALVAGE_COMPARE,
                request_id=uuid.uuid4().hex,
                payload=salvage.blind_payload(plan.root, blind, digests, plan.manifest)
                | {"fingerprint": plan.fingerprint},
            )
        raise salvage.WorkspaceRootNotFound(f"{salvage.ROOT_NOT_FOUND}: {blind}")
    diff = salvage.diff_against_manifest(digests, plan.manifest)
    checkpoint("compare:before_receipt")
    with fenced(plan.retirement_id, attempt_id) as r:
        _receipt(
            r,
            ReceiptKind.SALVAGE_COMPARE,
            request_id=uuid.uuid4().hex,
            payload=diff.as_payload(plan.root) | {"fingerprint": plan.fingerprint},
        )
        r.size_bytes = diff.total_bytes
        _succeeded(r)
        r.stage = Stage.RETIRING if diff.clean else Stage.EXPORTING
        r.save()
    checkpoint("compare:after_receipt")


def do_export(plan: Plan, attempt_id, worker: Worker) -> None:
    provider = worker.provider_of(plan)
    gone = _ensure_started(plan, attempt_id, provider)
    if gone is not None:
        _close_gone(plan, attempt_id, gone)
        return
    try:
        opened = provider.open_files(plan.sandbox_id, plan.root, sorted(plan.export_files))
        exported = salvage.export_files(opened, plan.export_files)
    except salvage.StaleCompare as exc:
        with fenced(plan.retirement_id, attempt_id) as r:
            _receipt(
                r,
                ReceiptKind.SALVAGE_EXPORT,
                request_id=uuid.uuid4().hex,
                payload={
                    "verified": False,
                    "stale": True,
                    "compare_receipt_id": plan.compare_receipt_id,
                    "error": str(exc),
                    "fingerprint": plan.fingerprint,
                },
            )
            r.stage = Stage.COMPARING
            r.save()
        return
    checkpoint("export:before_receipt")
    with fenced(plan.retirement_id, attempt_id) as r:
        issue_id = r.lease.issue_id
        files = []
        for f in exported:
            attachment = None
            if issue_id is not None:
                attachment = Attachment.objects.create(
                    issue_id=issue_id,
                    retirement=r,
                    path=f["path"],
                    sha256=f["sha256"],
                    size=f["size"],
                    file=f["storage"],
                )
            files.append(
                {
                    "path": f["path"],
                    "size": f["size"],
                    "sha256": f["sha256"],
                    "attachment": str(attachment.pk) if attachment else None,
                    "storage": f["storage"],
                }
            )
        _receipt(
            r,
            ReceiptKind.SALVAGE_EXPORT,
            request_id=uuid.uuid4().hex,
            payload={
                "verified": True,
                "compare_receipt_id": plan.compare_receipt_id,
                "files": files,
                "deleted": plan.deleted,
                "bytes": sum(f["size"] for f in files),
                "fingerprint": plan.fingerprint,
            },
        )
        _succeeded(r)
        r.stage = Stage.RETIRING
        r.save()
    checkpoint("export:after_receipt")


def authorize_destroy(r: Retirement, cand: Candidate | None, now) -> str:
    """The gate every destroy passes: returns the proof's reason or raises DestroyRefused.
    Call under the record's row lock."""
    if cand is None or cand.kind is None:
        raise DestroyRefused("the sandbox is no longer a candidate")
    if cand.kind in STOP_ONLY_KINDS or r.kind in STOP_ONLY_KINDS:
        raise DestroyRefused(f"{cand.kind} allows a stop only, never a destroy")
    holds = compute_holds(
        cand.facts, cand.kind, operator_hold_reason=r.operator_hold_reason, now=now
    )
    if holds:
        raise DestroyRefused(f"held: {', '.join(holds)}")
    env = r.environment
    if env.retirement_mode == RetirementMode.OBSERVE:
        raise DestroyRefused("the environment is in observe mode")
    receipts = _record_receipts(r)
    # Proof is bound to what it saw: recomputed here, under the lock (DOMAIN §2.3).
    proof = proof_from_receipts(r, receipts, fingerprint_of(r))
    if not proof:
        if proof.void:
            raise ProofVoid(proof)
        raise DestroyRefused(f"no proof: {proof.reason}")
    if env.retirement_mode == RetirementMode.MANUAL and not has_approval(r, proof, receipts):
        raise DestroyRefused("manual mode: no operator approval recorded")
    if decide.notice_on(env.retirement_mode, env.notice_period):
        if not decide.notice_valid(r.retire_after, r.notice_proof, proof_key_of(proof)):
            raise DestroyRefused("notice period: no notice was given for this proof")
        if r.retire_after is None or r.retire_after > now:
            raise DestroyRefused(f"notice period: not before {_iso(r.retire_after)}")
    return proof.reason


def _await_destroy(provider, sandbox_id: str, info):
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


def retire_sandbox(plan: Plan, attempt_id, worker: Worker) -> None:
    """The one path to a provider destroy: gate under the lock, destroy (idempotent;
    a read first, so a sandbox already gone is not destroyed again), record."""
    now = timezone.now()
    with fenced(plan.retirement_id, attempt_id) as r:
        cand = judge_lease_locked(r.lease_id)
        try:
            proof_reason = authorize_destroy(r, cand, now)
        except ProofVoid as void:
            # Nothing is destroyed: the record goes back to compare, and says why.
            _record_void(r, void.proof)
            r.stage = Stage.COMPARING
            r.next_attempt_at = now
            r.save()
            log.warning("proof void for sandbox %s: %s", plan.sandbox_id, void)
            return
        # Extend the claim so the destroy and its receipt happen inside it.
        r.claimed_until = now + timedelta(seconds=CLAIM_SECONDS)
        r.stage = Stage.RETIRING
        r.save()
        kind = r.kind
    provider = worker.provider_of(plan)
    try:
        info = provider.get(plan.sandbox_id)
    except TransientProviderError:
        raise
    except ProviderError as exc:
        if kind != RetirementKind.RESUME_FAILED:
            raise
        # A replaced sandbox that cannot be read is still deleted (seed 004),
        # by id; the read after the destroy confirms it.
        log.warning("%s cannot be read (%s); destroying it by id", plan.sandbox_id, exc)
        info = None
    if info is not None and info.state == SandboxState.DESTROYING:
        # A destroy is already under way (a worker died after its DELETE was
        # received): wait for it by reading, never send a second DELETE.
        info = _await_destroy(provider, plan.sandbox_id, info)
    if info is not None and info.state == SandboxState.DESTROYED:
        conf = Confirmation(
            sandbox_id=plan.sandbox_id,
            state=SandboxState.DESTROYED,
            confirmed_at=timezone.now(),
            request_id=uuid.uuid4().hex,
            operation="get",
            provider=getattr(provider, "name", ""),
        )
    else:
        conf = provider.destroy(plan.sandbox_id)
    checkpoint("retire:after_destroy")
    after = provider.get(plan.sandbox_id)
    if after.state == SandboxState.DESTROYING:
        after = _await_destroy(provider, plan.sandbox_id, after)
    if after.state != SandboxState.DESTROYED:
        raise ProviderError(
            f"{plan.sandbox_id} still reads {after.state} after destroy", sandbox_id=plan.sandbox_id
        )
    now = timezone.now()
    with fenced(plan.retirement_id, attempt_id) as r:
        _close_destroyed(
            r,
            conf,
            kind=ReceiptKind.RETIREMENT,
            payload={"proof": proof_reason}
            | ({"basis": "replacement"} if kind == RetirementKind.RESUME_FAILED else {}),
            stage=Stage.RETIRED,
            reason=proof_reason,
            now=now,
        )
        notify.retired(r, proof_reason)
    worker.retired_by_env[plan.environment.pk] += 1
    worker.retired += 1


STEPS = {
    "stop_only": do_stop_only,
    "stop_before_wait": do_stop_before_wait,
    "compare": do_compare,
    "export": do_export,
    "retire": retire_sandbox,
}


def record_failure(retirement_id, attempt_id, exc: BaseException, worker: Worker) -> None:
    """Keep the sandbox as it was (stopped again if we started it) and schedule a retry."""
    try:
        r0 = Retirement.objects.select_related("environment").get(pk=retirement_id)
        if r0.started_for_salvage and r0.attempt_id == attempt_id:
            conf = _stop(worker.provider(r0.environment, r0.provider), r0.provider_lease_id)
            with fenced(retirement_id, attempt_id) as r:
                if conf is not None:
                    _stop_receipts(r, conf, retain=False)
                r.started_for_salvage = False
                r.save()
    except DB_LOST:
        raise
    except Exception as stop_exc:  # the retry will stop it; record the first error
        log.warning("could not stop %s after a failure: %s", retirement_id, stop_exc)
    now = timezone.now()
    try:
        with fenced(retirement_id, attempt_id) as r:
            was_attention = r.needs_attention
            was_stage = r.stage
            was_attempts = r.attempts
            r.attempts += 1
            r.failing_since = r.failing_since or now
            r.last_error = f"{type(exc).__name__}: {exc}"[:2000]
            r.needs_attention = r.attempts >= NEEDS_ATTENTION_AFTER
            r.next_attempt_at = now + backoff(r.attempts)
            r.stage = Stage.FAILED
            r.save()
            # Every failed attempt gets its own audit row with its error; the one
            # that turns the record to needs_attention is named so.
            audit.record(
                actor=None,
                action="retirement.needs_attention"
                if r.needs_attention and not was_attention
                else "retirement.failed",
                obj=r,
                reason=r.last_error,
                before={"stage": was_stage, "attempts": was_attempts},
                after={
                    "stage": r.stage,
                    "attempts": r.attempts,
                    "next_attempt_at": r.next_attempt_at.isoformat(),
                },
            )
            if r.needs_attention and not was_attention:
                notify.needs_attention(r)
    except ClaimLost:
        pass
    worker.failed += 1


def advance(retirement_id, attempt_id, worker: Worker, *, max_steps: int = 8) -> None:
    """Advance one claimed record as far as it can go without waiting.

    A dropped database connection (DB_LOST) propagates with the claim still
    set: the caller reconnects and releases it (or leaves it to expire)."""
    try:
        _advance(retirement_id, attempt_id, worker, max_steps)
    except ClaimLost as exc:
        log.info("claim lost, result dropped: %s", exc)
    # A worker that dies (BaseException) leaves its claim to expire: that is the
    # crash the fencing is for, and what the crash-safety tests simulate.
    release_claim(retirement_id, attempt_id)


def _advance(retirement_id, attempt_id, worker: Worker, max_steps: int) -> None:
    for _ in range(max_steps):
        plan = plan_step(retirement_id, attempt_id, worker)
        if plan is None:
            log.info("record %s waits or is closed", retirement_id)
            break
        try:
            STEPS[plan.action](plan, attempt_id, worker)
        except (ClaimLost, *DB_LOST):
            # Not the step's failure: the claim or the connection is gone. No
            # attempt is counted; the record is worked again from its receipts.
            log.warning(
                "step %s on sandbox %s interrupted (claim or database lost)",
                plan.action,
                plan.sandbox_id,
            )
            raise
        except DestroyRefused as exc:
            log.warning("destroy refused for sandbox %s: %s", plan.sandbox_id, exc)
            record_failure(retirement_id, attempt_id, exc, worker)
            break
        except Exception as exc:
            log.warning(
                "step %s on sandbox %s failed, will retry: %s: %s",
                plan.action,
                plan.sandbox_id,
                type(exc).__name__,
                exc,
            )
            record_failure(retirement_id, attempt_id, exc, worker)
            worker.errors.append(
                {"retirement": str(retirement_id), "step": plan.action, "error": str(exc)[:500]}
            )
            break
        log.info("step %s on sandbox %s done", plan.action, plan.sandbox_id)
        worker.advanced += 1
        if plan.action == "stop_only":
            break
