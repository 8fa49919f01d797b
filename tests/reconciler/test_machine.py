"""The salvage-then-retire machine: holds, the proof rule, compare/export, failures,
modes and the blast-radius cap."""

import uuid
from datetime import UTC, time, timedelta
from pathlib import Path

import pytest
from django.core.files.storage import default_storage
from django.utils import timezone

from sandboxes import content_store
from sandboxes import models as m
from sandboxes.providers.base import TransientProviderError
from sandboxes.reconciler import machine
from sandboxes.reconciler.claims import ClaimLost
from sandboxes.reconciler.failures import backoff
from sandboxes.reconciler.gate import DestroyRefused
from sandboxes.reconciler.listing import sync_retirements
from sandboxes.reconciler.plan import Action, Plan
from sandboxes.reconciler.steps import do_compare, retire_sandbox
from sandboxes.reconciler.worker import ProviderMismatch, Worker
from sandboxes.rules.window import DAYS
from tests import factories as f

from .conftest import SAVED, ago, claim, retire, retirement_of

pytestmark = pytest.mark.django_db


def attest(r):
    return f.ReceiptFactory(
        lease=r.lease,
        retirement=r,
        kind=m.ReceiptKind.OPERATOR_ATTESTED,
        state=None,
        payload={"typed_sandbox_id": r.provider_lease_id, "reason": "discard", "user": "admin"},
    )


def approve(r):
    f.ReceiptFactory(
        lease=r.lease,
        retirement=r,
        kind=m.ReceiptKind.APPROVAL,
        state=None,
        payload={"user": "op", "reason": "ok"},
    )
    m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())


def abandoned(warm, **kw):
    kw.setdefault("status", m.LeaseStatus.FAILED)
    return warm(**kw)


# --- every hold blocks destroy -------------------------------------------------------


def _hold_setups():
    def run_active(warm):
        return abandoned(warm, heartbeat_run__status=m.RunStatus.RUNNING)

    def issue_run_active(warm):
        lease = abandoned(warm)
        f.HeartbeatRunFactory(issue=lease.issue, status=m.RunStatus.QUEUED)
        return lease

    def recovery_open(warm):
        lease = abandoned(warm)
        f.RecoveryActionFactory(lease=None, source_issue=lease.issue, evidence={})
        return lease

    def export_pending(warm):
        lease = abandoned(warm)
        f.PendingExportFactory(lease=lease)
        return lease

    def intent_pending(warm):
        lease = abandoned(warm)
        f.LeaseIntentFactory(lease=lease)
        return lease

    def sandbox_shared(warm):
        lease = abandoned(warm)
        f.EnvironmentLeaseFactory(
            environment=lease.environment,
            provider_lease_id=lease.provider_lease_id,
            status=m.LeaseStatus.PENDING_CLEANUP,
            acquired_at=lease.acquired_at - timedelta(hours=1),
        )
        return lease

    def newer_lease(warm):
        lease = abandoned(warm)
        sync_retirements()
        f.EnvironmentLeaseFactory(
            environment=lease.environment,
            provider_lease_id=lease.provider_lease_id,
            acquired_at=timezone.now(),
        )
        return lease

    def no_stop_receipt(warm):
        return abandoned(warm, receipt=False)

    def task_can_resume(warm):
        # Checked over every row naming the sandbox (DOMAIN §2.2): a row that
        # sorts older but whose task is bound to its workspace protects it.
        lease = abandoned(warm)
        f.EnvironmentLeaseFactory(
            environment=lease.environment,
            provider_lease_id=lease.provider_lease_id,
            status=m.LeaseStatus.RELEASED,
            acquired_at=lease.acquired_at - timedelta(minutes=1),
        )
        return lease

    def writer_active(warm):
        lease = abandoned(warm)
        ws = lease.execution_workspace
        ws.writer_run = lease.heartbeat_run
        ws.save()
        return lease

    def retention(warm):
        return warm(issue__status=m.IssueStatus.DONE, released_at=ago(hours=2))

    def unknown_age(warm):
        return warm(issue__status=m.IssueStatus.DONE, released_at=None)

    def provider_unsupported(warm):
        return abandoned(warm, env=f.EnvironmentFactory(provider="e2b"))

    def operator_hold(warm):
        lease = abandoned(warm)
        sync_retirements()
        m.Retirement.objects.filter(lease=lease).update(operator_hold_reason="investigating")
        return lease

    return {fn.__name__: fn for fn in locals().values() if callable(fn)}


def closed_window_env(**kwargs):
    """An environment whose retirement window opens three days from today: closed
    whatever the hour (docs/rules.md, the retirement window)."""
    day = DAYS[(timezone.now().astimezone(UTC).weekday() + 3) % 7]
    return f.EnvironmentFactory(
        time_zone="UTC", window_days=day, window_start=time(9), window_end=time(10), **kwargs
    )


def outside_window(warm):
    return abandoned(warm, env=closed_window_env())


HOLD_SETUPS = {**_hold_setups(), "outside_window": outside_window}


def test_every_hold_code_has_a_setup():
    assert set(HOLD_SETUPS) == {c.value for c in m.HoldCode}


@pytest.mark.parametrize("code", sorted(HOLD_SETUPS))
def test_each_hold_blocks_destroy_even_with_proof(code, warm, local, reconcile):
    lease = HOLD_SETUPS[code](warm)
    sync_retirements()
    r = retirement_of(lease)
    attest(r)  # proof in hand: only the hold stands in the way
    reconcile()
    r.refresh_from_db()
    lease.refresh_from_db()
    assert code in r.holds, r.holds
    assert r.stage == m.Stage.HELD
    assert r.hold_reasons[code]
    assert local.count("destroy") == 0
    assert local.count("start") == 0
    assert lease.status != m.LeaseStatus.EXPIRED
    # And the gate itself refuses, whatever the caller.
    attempt = claim(r)
    with pytest.raises(DestroyRefused, match="held"):
        retire_sandbox(_plan(r), attempt, Worker(provider_for=lambda e: local))
    assert local.count("destroy") == 0


# --- every destroy path refuses without proof ---------------------------------------------


def _plan(r):
    r.refresh_from_db()
    return Plan(Action.RETIRE, r.pk, r.environment, r.provider_lease_id)


def _kind_leases(warm):
    """One lease per kind whose proof is a receipt (resume_failed is proved by its
    replacement: see test_resume_failed_refuses_destroy_without_a_saved_workspace)."""
    a = abandoned(warm)
    b = warm(lease_policy=m.LeasePolicy.RETAIN_ON_FAILURE, status=m.LeaseStatus.FAILED)
    f.RecoveryActionFactory(lease=b, status=m.RecoveryStatus.RESOLVED)
    f.rebind_to_new_workspace(b)
    c = warm(issue__status=m.IssueStatus.DONE, released_at=ago(days=2))
    return [a, b, c]


def _compare(r, *, clean):
    return f.ReceiptFactory(
        lease=r.lease,
        retirement=r,
        kind=m.ReceiptKind.SALVAGE_COMPARE,
        state=None,
        payload={"clean": clean, "added": [], "changed": [], "deleted": ["x"]},
    )


NO_PROOF = {
    "no receipts": lambda r: None,
    "unclean compare": lambda r: _compare(r, clean=False),
    "unverified export": lambda r: f.ReceiptFactory(
        lease=r.lease,
        retirement=r,
        kind=m.ReceiptKind.SALVAGE_EXPORT,
        state=None,
        payload={"verified": False, "compare_receipt_id": str(_compare(r, clean=False).pk)},
    ),
    "export of an older compare": lambda r: (
        f.ReceiptFactory(
            lease=r.lease,
            retirement=r,
            kind=m.ReceiptKind.SALVAGE_EXPORT,
            state=None,
            payload={"verified": True, "compare_receipt_id": str(_compare(r, clean=False).pk)},
        ),
        _compare(r, clean=False),
    ),
    "attested with another sandbox id": lambda r: f.ReceiptFactory(
        lease=r.lease,
        retirement=r,
        kind=m.ReceiptKind.OPERATOR_ATTESTED,
        state=None,
        payload={"typed_sandbox_id": "something-else", "reason": "x", "user": "admin"},
    ),
    "attested without a reason": lambda r: f.ReceiptFactory(
        lease=r.lease,
        retirement=r,
        kind=m.ReceiptKind.OPERATOR_ATTESTED,
        state=None,
        payload={"typed_sandbox_id": r.provider_lease_id, "reason": " ", "user": "admin"},
    ),
}


@pytest.mark.parametrize("case", sorted(NO_PROOF))
def test_every_kind_refuses_destroy_without_proof(case, warm, local):
    leases = _kind_leases(warm)
    sync_retirements()
    for lease in leases:
        r = retirement_of(lease)
        NO_PROOF[case](r)
        attempt = claim(r)
        with pytest.raises(DestroyRefused, match="no proof"):
            retire_sandbox(_plan(r), attempt, Worker(provider_for=lambda e: local))
    assert local.count("destroy") == 0


@pytest.mark.parametrize("save_state", ["failed", "starting"])  # saving: writer_active
def test_resume_failed_refuses_destroy_without_a_saved_workspace(save_state, warm, local):
    """Seed 004: the replacement is the proof only while the workspace is still
    saved (a committed save) with no writer."""
    lease = warm(status=m.LeaseStatus.PENDING_CLEANUP, failure_reason="resume_failed")
    ws = lease.execution_workspace
    ws.save_state = save_state
    ws.save()
    sync_retirements()
    r = retirement_of(lease)
    with pytest.raises(DestroyRefused, match="no proof"):
        retire(r, local)
    assert local.count("destroy") == 0


def test_stop_only_kinds_refuse_destroy_even_with_proof(warm, local):
    lease = warm(
        status=m.LeaseStatus.RETAINED,
        disposition=m.Disposition.KEEP_RUNNING,
        heartbeat_run__status=m.RunStatus.FAILED,
        receipt=False,
    )
    sync_retirements()
    r = retirement_of(lease)
    attest(r)
    with pytest.raises(DestroyRefused, match="stop only"):
        retire(r, local)
    assert local.count("destroy") == 0


@pytest.mark.parametrize("mode", ["observe", "manual"])
def test_observe_and_unapproved_manual_refuse_destroy_with_proof(mode, warm, local):
    lease = abandoned(warm, env=f.EnvironmentFactory(retirement_mode=mode))
    sync_retirements()
    r = retirement_of(lease)
    attest(r)
    with pytest.raises(DestroyRefused):
        retire(r, local)
    assert local.count("destroy") == 0


def test_one_function_calls_destroy():
    root = Path(machine.__file__).parent
    callers = [
        (p.name, line.strip())
        for p in root.glob("*.py")
        for line in p.read_text().splitlines()
        if ".destroy(" in line
    ]
    assert callers == [("steps.py", "conf = provider.destroy(plan.sandbox_id)")]


def test_a_stale_claim_cannot_destroy(warm, local):
    lease = abandoned(warm)
    sync_retirements()
    r = retirement_of(lease)
    attest(r)
    claim(r)
    with pytest.raises(ClaimLost):
        retire_sandbox(_plan(r), uuid.uuid4(), Worker(provider_for=lambda e: local))
    assert local.count("destroy") == 0


# --- compare and export --------------------------------------------------------------------

UNSAVED = {
    "README.md": SAVED["README.md"],  # unchanged
    "src/app.py": b"print('edited after the save')\n",  # changed
    "notes/new.txt": b"fresh work\n",  # added
    # old.txt: deleted since the save
}


def test_compare_exports_exactly_the_unsaved_files_and_retire_waits(warm, local, reconcile):
    env = f.EnvironmentFactory(retirement_mode=m.RetirementMode.MANUAL)
    lease = abandoned(warm, env=env, files=UNSAVED)
    reconcile()
    r = retirement_of(lease)
    compare = r.receipts.get(kind=m.ReceiptKind.SALVAGE_COMPARE)
    assert [x["path"] for x in compare.payload["added"]] == ["notes/new.txt"]
    assert [x["path"] for x in compare.payload["changed"]] == ["src/app.py"]
    assert compare.payload["deleted"] == ["old.txt"]
    assert compare.payload["counts"] == {"added": 1, "changed": 1, "deleted": 1}
    assert compare.payload["clean"] is False and compare.payload["listing_digest"]

    export = r.receipts.get(kind=m.ReceiptKind.SALVAGE_EXPORT)
    assert export.payload["verified"] is True
    assert export.payload["compare_receipt_id"] == str(compare.pk)
    assert export.payload["deleted"] == ["old.txt"]
    files = {x["path"]: x for x in export.payload["files"]}
    assert set(files) == {"notes/new.txt", "src/app.py"}
    for path, entry in files.items():
        attachment = m.Attachment.objects.get(pk=entry["attachment"])
        assert attachment.issue_id == lease.issue_id and attachment.path == path
        assert attachment.file.name == m.Attachment.storage_name(entry["sha256"])
        with default_storage.open(attachment.file.name) as fh:
            assert fh.read() == UNSAVED[path]

    # Manual mode: waits for approval, and the sandbox it started is stopped again.
    assert r.stage == m.Stage.AWAITING_APPROVAL
    assert local.count("destroy") == 0
    assert local.inner.get(lease.provider_lease_id).state == "stopped"
    assert not r.started_for_salvage
    reconcile()
    assert local.count("destroy") == 0

    approve(r)
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED, (r.stage, r.closed_reason, r.last_error)
    assert local.count("destroy") == 1
    assert r.receipts.filter(kind=m.ReceiptKind.SALVAGE_EXPORT).count() == 1


def test_the_same_content_is_stored_once(warm, local, reconcile):
    # The saved files are there too: a compare that finds none of them proves nothing.
    same = {**SAVED, "a.txt": b"same bytes\n", "b/a-copy.txt": b"same bytes\n"}
    lease = abandoned(warm, files=same)
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED
    names = set(m.Attachment.objects.filter(retirement=r).values_list("file", flat=True))
    assert len(names) == 1


def test_a_storage_error_during_export_keeps_the_sandbox_and_retries(
    warm, local, reconcile, monkeypatch
):
    lease = abandoned(warm, files=UNSAVED)

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(content_store, "put_verified", broken)
    before = timezone.now()
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.FAILED and r.attempts == 1
    assert "disk full" in r.last_error
    assert r.next_attempt_at >= before + timedelta(seconds=30)
    assert local.count("destroy") == 0
    assert local.inner.get(lease.provider_lease_id).state == "stopped"
    assert not r.receipts.filter(kind=m.ReceiptKind.SALVAGE_EXPORT).exists()

    monkeypatch.undo()
    reconcile()  # not due yet
    assert local.count("destroy") == 0
    m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())  # retry
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED and r.attempts == 0
    assert local.count("destroy") == 1


def test_an_export_that_does_not_verify_is_not_proof(warm, local, reconcile, monkeypatch):
    lease = abandoned(warm, files=UNSAVED)
    monkeypatch.setattr(content_store, "digest_of", lambda storage, name: ("0" * 64, 0))
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.FAILED and "do not verify" in r.last_error
    assert local.count("destroy") == 0


# --- failures and retries -----------------------------------------------------------------


def test_backoff_doubles_from_30s_to_30min():
    assert [backoff(n).total_seconds() for n in range(1, 9)] == [
        30,
        60,
        120,
        240,
        1800,  # the 5th failure: every 30 min from now on, with needs_attention
        1800,
        1800,
        1800,
    ]


def test_needs_attention_after_five_failures_and_never_gives_up(
    warm, local, reconcile, monkeypatch
):
    lease = abandoned(warm)

    def flaky(*args, **kwargs):
        raise TransientProviderError("503 from provider")

    monkeypatch.setattr(local.inner, "hash_files", flaky)
    for attempt in range(1, 8):
        before = timezone.now()
        reconcile()
        r = retirement_of(lease)
        assert r.stage == m.Stage.FAILED and r.attempts == attempt
        assert r.needs_attention is (attempt >= 5)
        if attempt >= 5:  # after 5 failed attempts: every 30 min
            assert r.next_attempt_at >= before + timedelta(minutes=30)
        m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())
    assert local.count("destroy") == 0
    assert m.AuditEvent.objects.filter(action="retirement.needs_attention").count() == 1
    monkeypatch.undo()
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED and not r.needs_attention


def test_observe_mode_lists_and_explains_but_calls_no_provider(warm, local, reconcile):
    env = f.EnvironmentFactory(retirement_mode=m.RetirementMode.OBSERVE)
    lease = abandoned(warm, env=env)
    held = abandoned(warm, env=env, receipt=False)
    running = warm(
        env=env,
        status=m.LeaseStatus.RETAINED,
        disposition=m.Disposition.KEEP_RUNNING,
        heartbeat_run__status=m.RunStatus.FAILED,
        receipt=False,
        stopped=False,
    )
    reconcile()
    reconcile()
    assert local.calls == []
    assert retirement_of(lease).stage == m.Stage.LISTED
    assert retirement_of(held).stage == m.Stage.HELD
    assert retirement_of(running).stage == m.Stage.LISTED


def test_the_blast_radius_cap_limits_retirements_per_pass(warm, local, reconcile):
    env = f.EnvironmentFactory(max_retirements_per_pass=2)
    leases = [abandoned(warm, env=env) for _ in range(5)]
    first = reconcile()
    assert first.retired == 2 and local.count("destroy") == 2
    reconcile()
    reconcile()
    assert local.count("destroy") == 5
    assert {retirement_of(lease).stage for lease in leases} == {m.Stage.RETIRED}


def test_dry_run_writes_nothing_and_calls_nothing(warm, local, reconcile):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    abandoned(warm)
    held = abandoned(warm, receipt=False)
    with CaptureQueriesContext(connection) as queries:
        record = reconcile(dry_run=True)
    assert record.dry_run and record.candidates == 2
    assert record.counts_by_stage == {"listed": 1, "held": 1}
    assert f"{held.provider_lease_id} abandoned_warm: held (no_stop_receipt)" in "\n".join(
        record.would
    )
    writes = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().split()[0].upper() in ("INSERT", "UPDATE", "DELETE")
    ]
    assert writes == []
    assert not m.ReconcilerPass.objects.exists()
    assert not m.Retirement.objects.exists() and not m.AuditEvent.objects.exists()
    assert local.calls == []


def test_an_operator_hold_then_release_resumes(warm, local, reconcile):
    lease = abandoned(warm)
    sync_retirements()
    r = retirement_of(lease)
    m.Retirement.objects.filter(pk=r.pk).update(operator_hold_reason="wait for legal")
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.HELD and r.holds == ["operator_hold"]
    assert local.calls == []
    m.Retirement.objects.filter(pk=r.pk).update(
        operator_hold_reason="", next_attempt_at=timezone.now()
    )
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED


def test_attested_retirement_skips_salvage(warm, local, reconcile):
    lease = abandoned(warm, files=UNSAVED)
    sync_retirements()
    attest(retirement_of(lease))
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED
    assert "attested" in r.closed_reason
    assert local.count("hash_files") == 0


def test_a_sandbox_started_for_compare_is_stopped_when_a_hold_appears(warm, local, monkeypatch):
    lease = abandoned(warm, files=UNSAVED)
    sync_retirements()
    real = do_compare

    def compare_then_hold(plan, attempt_id, worker):
        real(plan, attempt_id, worker)
        f.PendingExportFactory(lease=lease)

    monkeypatch.setitem(machine.STEPS, Action.COMPARE, compare_then_hold)
    from sandboxes.reconciler.passes import run_pass

    run_pass(provider_for=lambda env: local)
    r = retirement_of(lease)
    assert r.stage == m.Stage.HELD and "export_pending" in r.holds
    assert not r.started_for_salvage
    assert local.inner.get(lease.provider_lease_id).state == "stopped"
    assert local.count("destroy") == 0


# --- the blast-radius cap never leaves a sandbox started (review finding 1) ----------------


def test_the_cap_starts_nothing_more_and_leaves_no_sandbox_started(warm, local, reconcile):
    env = f.EnvironmentFactory(max_retirements_per_pass=1)
    leases = [abandoned(warm, env=env) for _ in range(4)]
    first = reconcile()
    assert first.retired == 1
    states = {
        lease.provider_lease_id: local.inner.get(lease.provider_lease_id).state for lease in leases
    }
    assert "started" not in states.values(), states
    assert local.count("start") == 1  # only the sandbox that could be retired was inspected
    assert not m.Retirement.objects.filter(started_for_salvage=True).exists()
    for _ in range(3):
        reconcile()
    assert {retirement_of(lease).stage for lease in leases} == {m.Stage.RETIRED}


def test_a_record_started_for_salvage_is_stopped_when_the_cap_stops_its_retire(warm, local):
    env = f.EnvironmentFactory(max_retirements_per_pass=1)
    lease = abandoned(warm, env=env)
    sync_retirements()
    r = retirement_of(lease)
    _compare(r, clean=True)
    local.inner.start(lease.provider_lease_id)  # a worker started it for the compare
    m.Retirement.objects.filter(pk=r.pk).update(
        stage=m.Stage.RETIRING, started_for_salvage=True, next_attempt_at=timezone.now()
    )
    worker = Worker(provider_for=lambda e: local)
    worker.retired_by_env[env.pk] = 1  # the cap is reached in this pass
    machine.advance(r.pk, claim(r), worker)
    r.refresh_from_db()
    assert local.inner.get(lease.provider_lease_id).state == "stopped"
    assert not r.started_for_salvage and r.stage == m.Stage.RETIRING
    assert r.next_attempt_at is not None and local.count("destroy") == 0


# --- observe mode (review findings 7 and 10a) ---------------------------------------------


def _switch_to_observe(lease):
    m.Environment.objects.filter(pk=lease.environment_id).update(
        retirement_mode=m.RetirementMode.OBSERVE
    )


def test_a_due_record_in_an_environment_switched_to_observe_calls_no_provider(
    warm, local, reconcile
):
    lease = abandoned(warm)
    sync_retirements()
    r = retirement_of(lease)
    m.Retirement.objects.filter(pk=r.pk).update(
        stage=m.Stage.FAILED, attempts=2, next_attempt_at=timezone.now()
    )
    _switch_to_observe(lease)
    reconcile()
    r.refresh_from_db()
    assert local.calls == []
    assert r.stage == m.Stage.LISTED and r.next_attempt_at is None
    assert local.inner.get(lease.provider_lease_id).state == "stopped"


@pytest.mark.parametrize("held", [False, True], ids=["clear", "held"])
def test_observe_stops_a_sandbox_started_for_salvage_before_the_switch(
    held, warm, local, reconcile
):
    lease = abandoned(warm)
    sync_retirements()
    r = retirement_of(lease)
    # A worker started the sandbox for a compare, then the operator switched the
    # environment to observe (and, in the held case, an export became pending).
    local.inner.start(lease.provider_lease_id)
    m.Retirement.objects.filter(pk=r.pk).update(
        stage=m.Stage.COMPARING, started_for_salvage=True, next_attempt_at=timezone.now()
    )
    _switch_to_observe(lease)
    if held:
        f.PendingExportFactory(lease=lease)
    reconcile()
    r.refresh_from_db()
    assert local.inner.get(lease.provider_lease_id).state == "stopped"
    assert not r.started_for_salvage
    assert r.stage == (m.Stage.HELD if held else m.Stage.LISTED)
    assert {op for op, _ in local.calls} <= {"get", "stop"} and local.count("stop") == 1
    stop = r.receipts.get(kind=m.ReceiptKind.TERMINATION)
    assert stop.state == m.TerminationState.STOPPED


# --- a sandbox already gone is recorded once (review finding 4) ---------------------------


def test_a_sandbox_already_gone_is_recorded_once_and_not_relisted(warm, local, reconcile):
    lease = abandoned(warm)
    local.inner.destroy(lease.provider_lease_id)  # gone before the console got to it
    for _ in range(3):
        reconcile()
    [r] = m.Retirement.objects.filter(provider_lease_id=lease.provider_lease_id)
    assert r.stage == m.Stage.DISMISSED and r.closed_reason == "already gone at the provider"
    lease.refresh_from_db()
    assert lease.status == m.LeaseStatus.EXPIRED
    assert lease.cleanup_status == m.CleanupStatus.SUCCESS
    [gone] = r.receipts.filter(kind=m.ReceiptKind.TERMINATION)
    assert gone.state == m.TerminationState.DESTROYED
    assert gone.schema == m.RECEIPT_SCHEMAS[m.ReceiptKind.TERMINATION]
    assert gone.payload["operation"] == "get" and gone.payload["state"] == "destroyed"
    assert m.AuditEvent.objects.filter(sandbox_id=lease.provider_lease_id).count() == 1
    assert local.count("destroy") == 0 and local.count("start") == 0


def test_a_sandbox_gone_before_its_export_is_recorded_once(warm, local, monkeypatch):
    lease = abandoned(warm, files=UNSAVED)
    sync_retirements()
    real = do_compare

    def compare_then_vanish(plan, attempt_id, worker):
        real(plan, attempt_id, worker)
        local.inner.destroy(plan.sandbox_id)

    monkeypatch.setitem(machine.STEPS, Action.COMPARE, compare_then_vanish)
    from sandboxes.reconciler.passes import run_pass

    run_pass(provider_for=lambda env: local)
    monkeypatch.undo()
    run_pass(provider_for=lambda env: local)
    [r] = m.Retirement.objects.filter(provider_lease_id=lease.provider_lease_id)
    assert r.stage == m.Stage.DISMISSED and not r.started_for_salvage
    lease.refresh_from_db()
    assert lease.status == m.LeaseStatus.EXPIRED


def test_a_stop_only_sandbox_already_gone_is_recorded_once(warm, local, reconcile):
    lease = warm(
        status=m.LeaseStatus.RETAINED,
        disposition=m.Disposition.KEEP_RUNNING,
        heartbeat_run__status=m.RunStatus.FAILED,
        receipt=False,
        stopped=False,
    )
    local.inner.destroy(lease.provider_lease_id)
    for _ in range(3):
        reconcile()
    [r] = m.Retirement.objects.filter(provider_lease_id=lease.provider_lease_id)
    assert r.stage == m.Stage.DISMISSED
    lease.refresh_from_db()
    assert lease.status == m.LeaseStatus.EXPIRED
    assert local.count("stop") == 0


# --- the lease's provider, never another one (review finding 5) ----------------------------


def test_a_lease_on_another_provider_than_its_environment_is_refused(warm, local, reconcile):
    env = f.EnvironmentFactory(provider=m.ProviderName.LOCAL)
    lease = abandoned(warm, env=env, provider=m.ProviderName.DAYTONA)
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.FAILED and r.attempts == 1
    assert "differs from its environment's provider" in r.last_error
    assert local.calls == []
    assert local.inner.get(lease.provider_lease_id).state == "stopped"


def test_the_default_client_is_for_the_lease_provider_with_the_environment_settings(settings):
    from sandboxes.providers.daytona import DaytonaProvider

    settings.PROVIDER_API_KEY_VARIABLES = ["X_KEY"]
    env = f.EnvironmentFactory(
        provider=m.ProviderName.DAYTONA, api_url="https://daytona.test/api", api_key_env="X_KEY"
    )
    client = Worker().provider(env, m.ProviderName.DAYTONA)
    assert isinstance(client, DaytonaProvider) and client.api_url == "https://daytona.test/api"
    with pytest.raises(ProviderMismatch):
        Worker().provider(env, m.ProviderName.LOCAL)


# --- re-checks the reviewer found untested (review finding 10b, 10c) ------------------------


def test_a_task_that_resumed_the_workspace_before_the_claim_is_dismissed_under_the_lock(
    warm, local
):
    lease = warm(status=m.LeaseStatus.RELEASED)
    f.rebind_to_new_workspace(lease)  # abandoned: the task moved on
    sync_retirements()
    r = retirement_of(lease)
    assert r.kind == m.RetirementKind.ABANDONED_WARM and r.stage == m.Stage.LISTED
    # Between the listing and the claim the task resumes the old workspace.
    lease.issue.bound_workspace = lease.execution_workspace
    lease.issue.save(update_fields=["bound_workspace"])
    m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())
    machine.advance(r.pk, claim(r), Worker(provider_for=lambda e: local))
    r.refresh_from_db()
    assert r.stage == m.Stage.DISMISSED and "predicate stopped matching" in r.closed_reason
    assert local.calls == []


def test_a_file_changed_between_compare_and_export_fails_then_is_exported_fresh(
    warm, local, monkeypatch
):
    # The stale export is a failed attempt (issue 22 item 4): the sandbox is
    # stopped and the retry, after its backoff, compares again.
    import hashlib

    lease = abandoned(warm, files=UNSAVED)
    sync_retirements()
    real = do_compare
    newer = b"print('edited again after the compare')\n"
    calls = []

    def compare_then_edit(plan, attempt_id, worker):
        real(plan, attempt_id, worker)
        if not calls:  # the agent writes once more, after the first compare
            target = local.inner._fs(plan.sandbox_id, "test") / "workspace" / "src/app.py"
            target.write_bytes(newer)
        calls.append(plan)

    monkeypatch.setitem(machine.STEPS, Action.COMPARE, compare_then_edit)
    from sandboxes.reconciler.passes import run_pass

    run_pass(provider_for=lambda env: local)
    r = retirement_of(lease)
    assert r.stage == m.Stage.FAILED and r.attempts == 1
    assert "src/app.py listed sha256" in r.last_error
    assert local.inner.get(lease.provider_lease_id).state == "stopped"
    m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())
    run_pass(provider_for=lambda env: local)
    r.refresh_from_db()
    first, second = r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE).order_by("created_at")
    stale, verified = r.receipts.filter(kind=m.ReceiptKind.SALVAGE_EXPORT).order_by("created_at")
    assert stale.payload["stale"] is True and stale.payload["verified"] is False
    assert stale.payload["compare_receipt_id"] == str(first.pk)
    assert verified.payload["verified"] is True
    assert verified.payload["compare_receipt_id"] == str(second.pk)
    [app] = [x for x in verified.payload["files"] if x["path"] == "src/app.py"]
    assert app["sha256"] == hashlib.sha256(newer).hexdigest()
    with default_storage.open(m.Attachment.objects.get(pk=app["attachment"]).file.name) as fh:
        assert fh.read() == newer
    assert r.stage == m.Stage.RETIRED and local.count("destroy") == 1


def test_every_failed_attempt_is_audited_with_its_error(warm, local, reconcile, monkeypatch):
    # Issue 15, defect 6: only the first failure (and the turn to needs_attention)
    # was audited, so a reviewer could not see the 2nd..nth attempts or their errors.
    lease = abandoned(warm)
    errors = iter(f"503 from provider (attempt {n})" for n in range(1, 8))

    def flaky(*args, **kwargs):
        raise TransientProviderError(next(errors))

    monkeypatch.setattr(local.inner, "hash_files", flaky)
    for _ in range(7):
        reconcile()
        r = retirement_of(lease)
        m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())
    rows = list(
        m.AuditEvent.objects.filter(
            object_id=str(r.pk), action__in=["retirement.failed", "retirement.needs_attention"]
        ).order_by("at")
    )
    assert [row.after["attempts"] for row in rows] == [1, 2, 3, 4, 5, 6, 7]
    assert [row.action for row in rows].count("retirement.needs_attention") == 1
    assert rows[4].action == "retirement.needs_attention"
    for n, row in enumerate(rows, start=1):
        assert f"(attempt {n})" in row.reason
        assert row.before["attempts"] == n - 1


def test_failing_since_marks_the_first_failure_of_a_run_and_clears_on_success(
    warm, local, reconcile, monkeypatch
):
    lease = abandoned(warm)

    def flaky(*args, **kwargs):
        raise TransientProviderError("503")

    monkeypatch.setattr(local.inner, "hash_files", flaky)
    reconcile()
    first = retirement_of(lease).failing_since
    assert first is not None
    m.Retirement.objects.filter(pk=retirement_of(lease).pk).update(next_attempt_at=timezone.now())
    reconcile()
    assert retirement_of(lease).attempts == 2 and retirement_of(lease).failing_since == first
    monkeypatch.undo()
    m.Retirement.objects.filter(pk=retirement_of(lease).pk).update(next_attempt_at=timezone.now())
    reconcile()
    assert retirement_of(lease).failing_since is None
