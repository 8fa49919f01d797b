"""The steps: provider I/O with no transaction open, then a fenced write of
the receipt and the record's stage (docs/architecture.md, steps 7-9). A step
runs a `Plan` (what the planner decided under the row lock), named by its
`Action`:

    do_stop_only         stop and retain (a correction, or a superseded warm sandbox)
    do_stop_before_wait  stop the sandbox the console started, before the record waits
    do_compare           diff the sandbox against its last durable save
    do_export            export what is unsaved to the task, verified by re-reading
    retire_sandbox       the one path to a provider destroy, through the gate

A sandbox found already gone at the provider is recorded once and dismissed.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from django.utils import timezone

from sandboxes import audit
from sandboxes.models import Attachment, Environment, EnvironmentLease, Retirement
from sandboxes.models.choices import (
    CleanupStatus,
    LeaseStatus,
    ReceiptKind,
    RetirementKind,
    Stage,
    TerminationState,
)
from sandboxes.notifications import events as notify
from sandboxes.providers.base import (
    Confirmation,
    ProviderError,
    RootNotFound,
    SandboxState,
    TransientProviderError,
)
from sandboxes.receipts import write_receipt, write_stop_receipts

from . import salvage, signals
from .candidates import judge_lease_locked
from .claims import CLAIM_SECONDS, fenced
from .gate import ProofVoid, authorize_destroy, await_destroy, record_void
from .records import clear_failures, close_record, iso, wait_record

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger(__name__)

CORRECTED_REASON = "stopped after an unsuccessful run"


class Action(StrEnum):
    """The step a plan names; machine.STEPS runs each."""

    STOP_ONLY = "stop_only"  # stop and retain (a correction, a superseded warm sandbox)
    STOP_BEFORE_WAIT = "stop_before_wait"  # stop the sandbox the console started
    COMPARE = "compare"
    EXPORT = "export"
    RETIRE = "retire"  # the destroy, through the gate


@dataclass
class Plan:
    action: Action
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


def _provider(plan: Plan, worker: Worker):
    # A plan built without a provider (tests) means the environment's.
    return worker.provider(plan.environment, plan.provider or plan.environment.provider)


def checkpoint(name: str) -> None:
    """A named point inside a step, announced (signals.checkpoint): a harness
    that makes a worker die there connects a receiver that raises."""
    signals.checkpoint.send(sender=__name__, name=name)


def stop(provider, sandbox_id: str) -> Confirmation | None:
    """Stop; a sandbox already gone needs no stop."""
    info = provider.get(sandbox_id)
    if info.state == SandboxState.DESTROYED:
        return None
    return provider.stop(sandbox_id)


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


def _close_destroyed(
    r: Retirement, conf: Confirmation, *, kind: str, payload: dict, stage: str, reason: str, now
) -> None:
    """The provider confirmed the sandbox is gone: its receipt, the lease expired and
    the record closed, together (call inside the fenced transaction)."""
    write_receipt(
        r,
        kind,
        request_id=conf.request_id,
        payload=conf.as_payload() | payload,
        state=TerminationState.DESTROYED,
        at=conf.confirmed_at,
    )
    lease = EnvironmentLease.objects.select_for_update().get(pk=r.lease_id)
    # Only a lease that still names the gone sandbox is expired: one moved since
    # describes a sandbox that may well exist.
    if (lease.provider, lease.provider_lease_id) == (r.provider, r.provider_lease_id):
        lease.status = LeaseStatus.EXPIRED
        lease.cleanup_status = CleanupStatus.SUCCESS
        lease.save(update_fields=["status", "cleanup_status", "updated_at"])
    clear_failures(r)
    r.started_for_salvage = False
    r.provider_state = str(SandboxState.DESTROYED)
    r.provider_state_at = conf.confirmed_at
    close_record(r, stage, reason, now)


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


# --- stops ----------------------------------------------------------------------------


def do_stop_only(plan: Plan, attempt_id, worker: Worker) -> None:
    """Stop, confirm, receipt, lease → released (or the release rule's status). Never destroys."""
    provider = _provider(plan, worker)
    conf = stop(provider, plan.sandbox_id)
    checkpoint("stop_only:after_stop")
    if conf is None:
        _close_gone(plan, attempt_id, _gone(provider, plan.sandbox_id))
        return
    now = timezone.now()
    with fenced(plan.retirement_id, attempt_id) as r:
        lease = _release_stopped_lease(r, conf)
        clear_failures(r)
        r.started_for_salvage = False
        r.provider_state = str(conf.state)
        r.provider_state_at = conf.confirmed_at
        if r.kind == RetirementKind.STOP_AFTER_UNSUCCESSFUL_RUN:
            # A correction, not a retirement: done once the stop is confirmed.
            close_record(r, Stage.CORRECTED, CORRECTED_REASON, now)
            notify.correction_stopped(r)
            return
        # The stopped sandbox is judged afresh on a later pass (seed 001).
        wait_record(r, Stage.LISTED, next_attempt_at=now)
        audit.record(
            actor=None,
            action="retirement.stopped",
            obj=r,
            reason=f"stop-only step for {r.kind}",
            after={"lease_status": lease.status, "disposition": lease.disposition},
        )


def _release_stopped_lease(r: Retirement, conf: Confirmation) -> EnvironmentLease:
    """The stop receipts, and the console's own act on the mirrored lease
    (docs/rules.md, candidate kinds): the sandbox is stopped and kept, so the
    lease is `released`. The disposition Paperclip reported stays as evidence,
    and the source time is left alone, so a later report from Paperclip still
    wins. A retry on the same workspace can still resume it; a later pass
    judges it afresh."""
    lease = EnvironmentLease.objects.select_for_update().get(pk=r.lease_id)
    write_stop_receipts(r, conf, retain=True)
    if (lease.provider, lease.provider_lease_id) != (r.provider, r.provider_lease_id):
        return lease  # moved to another sandbox meanwhile: this stop says nothing of it
    before = {
        "status": lease.status,
        "released_at": iso(lease.released_at),
        "cleanup_status": lease.cleanup_status,
    }
    # As Paperclip settles a stop-only cleanup (sandbox-stop-and-retain.ts,
    # settleStopOnlyCleanup): released, cleanup success, released now; what its
    # predicates then read as a confirmed stop (docs/rules.md, proof): the stop's
    # receipt is confirmed within [acquired_at, released_at].
    lease.status = LeaseStatus.RELEASED
    lease.cleanup_status = CleanupStatus.SUCCESS
    if lease.released_at is None or lease.released_at < conf.confirmed_at:
        lease.released_at = conf.confirmed_at
    lease.save(update_fields=["status", "cleanup_status", "released_at", "updated_at"])
    audit.record(
        actor=None,
        action="lease.stopped_and_retained",
        obj=lease,
        reason=f"the console stopped and retained the sandbox ({r.kind})",
        before=before,
        after={
            "status": lease.status,
            "released_at": iso(lease.released_at),
            "cleanup_status": lease.cleanup_status,
        },
    )
    return lease


def do_stop_before_wait(plan: Plan, attempt_id, worker: Worker) -> None:
    conf = stop(_provider(plan, worker), plan.sandbox_id)
    with fenced(plan.retirement_id, attempt_id) as r:
        if conf is not None:
            write_stop_receipts(r, conf, retain=False)
            r.provider_state = str(conf.state)
            r.provider_state_at = conf.confirmed_at
        r.started_for_salvage = False
        r.save()


# --- salvage --------------------------------------------------------------------------


def _mark_started(retirement_id, attempt_id) -> None:
    with fenced(retirement_id, attempt_id) as r:
        r.started_for_salvage = True
        r.save(update_fields=["started_for_salvage", "updated_at"])


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
    provider = _provider(plan, worker)
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
            write_receipt(
                r,
                ReceiptKind.SALVAGE_COMPARE,
                payload=salvage.blind_payload(plan.root, blind, digests, plan.manifest)
                | {"fingerprint": plan.fingerprint},
            )
        raise salvage.WorkspaceRootNotFound(f"{salvage.ROOT_NOT_FOUND}: {blind}")
    diff = salvage.diff_against_manifest(digests, plan.manifest)
    checkpoint("compare:before_receipt")
    with fenced(plan.retirement_id, attempt_id) as r:
        write_receipt(
            r,
            ReceiptKind.SALVAGE_COMPARE,
            payload=diff.as_payload(plan.root) | {"fingerprint": plan.fingerprint},
        )
        r.size_bytes = diff.total_bytes
        if diff.clean:
            # A proof. A dirty compare is not one until its export verifies, so
            # a retry whose export fails again counts on (docs/rules.md, claims
            # and failures): a toolbox that keeps contradicting itself needs attention.
            clear_failures(r)
        r.stage = Stage.RETIRING if diff.clean else Stage.EXPORTING
        r.save()
    checkpoint("compare:after_receipt")


def do_export(plan: Plan, attempt_id, worker: Worker) -> None:
    provider = _provider(plan, worker)
    gone = _ensure_started(plan, attempt_id, provider)
    if gone is not None:
        _close_gone(plan, attempt_id, gone)
        return
    try:
        opened = provider.open_files(plan.sandbox_id, plan.root, sorted(plan.export_files))
        exported = salvage.export_files(opened, plan.export_files, plan.root)
    except salvage.StaleCompare as exc:
        # A failed attempt (docs/rules.md, claims and failures): the machine's
        # record_failure stops the sandbox, backs off and, after 5, needs attention.
        _record_stale_export(plan, attempt_id, exc)
        raise
    checkpoint("export:before_receipt")
    with fenced(plan.retirement_id, attempt_id) as r:
        files = [_attach(r, f) for f in exported]
        write_receipt(
            r,
            ReceiptKind.SALVAGE_EXPORT,
            payload={
                "verified": True,
                "compare_receipt_id": plan.compare_receipt_id,
                "files": files,
                "deleted": plan.deleted,
                "bytes": sum(f["size"] for f in files),
                "fingerprint": plan.fingerprint,
                "store": salvage.where_stored(),
            },
        )
        clear_failures(r)
        r.stage = Stage.RETIRING
        r.save()
    checkpoint("export:after_receipt")


def _record_stale_export(plan: Plan, attempt_id, exc: Exception) -> None:
    """A download did not match the compare's listing (the files changed, or the
    toolbox disagrees with itself): an unverified export receipt that says so,
    so the retry compares again instead of exporting that compare."""
    with fenced(plan.retirement_id, attempt_id) as r:
        write_receipt(
            r,
            ReceiptKind.SALVAGE_EXPORT,
            payload={
                "verified": False,
                "stale": True,
                "compare_receipt_id": plan.compare_receipt_id,
                "error": str(exc),
                "fingerprint": plan.fingerprint,
            },
        )


def _attach(r: Retirement, f: dict) -> dict:
    """One exported file, attached to the lease's task when it has one."""
    attachment = None
    if r.lease.issue_id is not None:
        attachment = Attachment.objects.create(
            issue_id=r.lease.issue_id,
            retirement=r,
            path=f["path"],
            sha256=f["sha256"],
            size=f["size"],
            file=f["storage"],
        )
    return {
        "path": f["path"],
        "size": f["size"],
        "sha256": f["sha256"],
        "attachment": str(attachment.pk) if attachment else None,
        "storage": f["storage"],
        "backend": f["backend"],
        "bucket": f["bucket"],
        "key": f["key"],
    }


# --- retirement -----------------------------------------------------------------------


def _authorize(plan: Plan, attempt_id, now) -> tuple[str, str] | None:
    """The gate under the lock; the claim is extended so the destroy and its
    receipt happen inside it. Returns (proof reason, kind), or None when the
    proof is void and the record went back to compare."""
    with fenced(plan.retirement_id, attempt_id) as r:
        cand = judge_lease_locked(r.lease_id)
        try:
            proof_reason = authorize_destroy(r, cand, now)
        except ProofVoid as void:
            # Nothing is destroyed: the record goes back to compare, and says why.
            record_void(r, void.proof)
            r.stage = Stage.COMPARING
            r.next_attempt_at = now
            r.save()
            log.warning("proof void for sandbox %s: %s", plan.sandbox_id, void)
            return None
        r.claimed_until = now + timedelta(seconds=CLAIM_SECONDS)
        r.stage = Stage.RETIRING
        r.save()
        return proof_reason, r.kind


def _read_before_destroy(provider, sandbox_id: str, kind: str):
    """The sandbox as it is, so one already gone is not destroyed again, and a
    destroy already under way (a worker died after its DELETE was received) is
    awaited by reading, never sent twice. None: it cannot be read."""
    try:
        info = provider.get(sandbox_id)
    except TransientProviderError:
        raise
    except ProviderError as exc:
        if kind != RetirementKind.RESUME_FAILED:
            raise
        # A replaced sandbox that cannot be read is still deleted (seed 004),
        # by id; the read after the destroy confirms it.
        log.warning("%s cannot be read (%s); destroying it by id", sandbox_id, exc)
        return None
    if info.state == SandboxState.DESTROYING:
        info = await_destroy(provider, sandbox_id, info)
    return info


def _confirm_destroyed(provider, sandbox_id: str) -> None:
    after = provider.get(sandbox_id)
    if after.state == SandboxState.DESTROYING:
        after = await_destroy(provider, sandbox_id, after)
    if after.state != SandboxState.DESTROYED:
        raise ProviderError(
            f"{sandbox_id} still reads {after.state} after destroy", sandbox_id=sandbox_id
        )


def retire_sandbox(plan: Plan, attempt_id, worker: Worker) -> None:
    """The one path to a provider destroy: gate under the lock, destroy (idempotent;
    a read first, so a sandbox already gone is not destroyed again), record."""
    authorized = _authorize(plan, attempt_id, timezone.now())
    if authorized is None:
        return
    proof_reason, kind = authorized
    provider = _provider(plan, worker)
    info = _read_before_destroy(provider, plan.sandbox_id, kind)
    if info is not None and info.state == SandboxState.DESTROYED:
        conf = _gone(provider, plan.sandbox_id)
    else:
        conf = provider.destroy(plan.sandbox_id)
    checkpoint("retire:after_destroy")
    _confirm_destroyed(provider, plan.sandbox_id)
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
