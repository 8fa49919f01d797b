"""Every incident in the seeds is a regression test (issue 4, "Done when")."""

from datetime import timedelta

import pytest

from sandboxes import models as m
from tests import factories as f

from .conftest import SAVED, ago, retirement_of

pytestmark = pytest.mark.django_db


def assert_retired(lease, local):
    lease.refresh_from_db()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED, (r.stage, r.holds, r.last_error)
    assert lease.status == m.LeaseStatus.EXPIRED
    assert lease.cleanup_status == m.CleanupStatus.SUCCESS
    assert local.get(lease.provider_lease_id).state == "destroyed"
    assert local.count("destroy", lease.provider_lease_id) == 1
    assert r.receipts.filter(kind=m.ReceiptKind.RETIREMENT).count() == 1


def assert_kept(lease, local):
    lease.refresh_from_db()
    assert local.count("destroy", lease.provider_lease_id) == 0
    assert local.inner.get(lease.provider_lease_id).state != "destroyed"
    assert lease.status != m.LeaseStatus.EXPIRED


# --- seed 001: abandoned warm sandboxes --------------------------------------------


def test_t05_retry_moved_the_task_and_the_old_stopped_sandbox_is_destroyed(warm, local, reconcile):
    lease = warm(heartbeat_run__status=m.RunStatus.FAILED)
    f.rebind_to_new_workspace(lease)
    reconcile()
    assert retirement_of(lease).kind == m.RetirementKind.ABANDONED_WARM
    assert_retired(lease, local)


def test_t12_failed_warm_lease_with_a_confirmed_stop_is_destroyed(warm, local, reconcile):
    lease = warm(status=m.LeaseStatus.FAILED, heartbeat_run__status=m.RunStatus.FAILED)
    reconcile()
    assert retirement_of(lease).kind == m.RetirementKind.ABANDONED_WARM
    assert_retired(lease, local)


def test_running_superseded_lease_is_stopped_then_destroyed_on_a_later_pass(warm, local, reconcile):
    lease = warm(status=m.LeaseStatus.RETAINED, receipt=False, stopped=False, released_at=None)
    f.rebind_to_new_workspace(lease)
    reconcile()
    lease.refresh_from_db()
    r = retirement_of(lease)
    assert r.kind == m.RetirementKind.SUPERSEDED_RUNNING_WARM
    assert lease.status == m.LeaseStatus.RELEASED
    assert local.inner.get(lease.provider_lease_id).state == "stopped"
    assert local.count("destroy") == 0
    stop = r.receipts.get(kind=m.ReceiptKind.TERMINATION)
    assert stop.state == "stopped" and stop.schema == "paperclip.remote-termination.v1"
    assert stop.run_id == lease.heartbeat_run_id

    reconcile()
    assert retirement_of(lease).kind == m.RetirementKind.ABANDONED_WARM
    assert_retired(lease, local)


def test_keep_task_can_still_resume_a_released_lease(warm, local, reconcile):
    lease = warm()  # bound to its own workspace
    reconcile()
    assert retirement_of(lease) is None
    assert_kept(lease, local)


def test_keep_task_can_still_resume_a_retained_lease_after_a_restart(warm, local, reconcile):
    lease = warm(status=m.LeaseStatus.RETAINED, stopped=False, receipt=False)
    reconcile()
    reconcile()
    assert retirement_of(lease) is None
    assert local.count("stop") == 0
    assert_kept(lease, local)


def test_keep_no_stop_receipt(warm, local, reconcile):
    lease = warm(status=m.LeaseStatus.FAILED, receipt=False)
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.HELD and m.HoldCode.NO_STOP_RECEIPT in r.holds
    assert_kept(lease, local)


def test_keep_a_newer_row_on_the_same_sandbox(warm, local, reconcile):
    lease = warm(status=m.LeaseStatus.FAILED)
    f.EnvironmentLeaseFactory(
        environment=lease.environment,
        provider_lease_id=lease.provider_lease_id,
        status=m.LeaseStatus.ACTIVE,
        acquired_at=ago(minutes=5),
        released_at=None,
    )
    reconcile()
    assert retirement_of(lease) is None
    assert_kept(lease, local)


def test_keep_a_run_in_flight_on_the_task(warm, local, reconcile):
    lease = warm(status=m.LeaseStatus.FAILED)
    f.HeartbeatRunFactory(issue=lease.issue, status=m.RunStatus.RUNNING)
    reconcile()
    assert retirement_of(lease).holds == [m.HoldCode.ISSUE_RUN_ACTIVE]
    assert_kept(lease, local)


# --- seed 000: restore sources and done tasks -----------------------------------------


def test_restore_source_is_retired_once_retry_closed_its_recovery_actions(warm, local, reconcile):
    lease = warm(
        status=m.LeaseStatus.FAILED,
        lease_policy=m.LeasePolicy.RETAIN_ON_FAILURE,
        heartbeat_run__status=m.RunStatus.FAILED,
    )
    action = f.RecoveryActionFactory(lease=lease, source_issue=lease.issue)
    reconcile()
    assert_kept(lease, local)
    # The user clicks Retry: a fresh run succeeds, the recovery actions close.
    m.RecoveryAction.objects.filter(pk=action.pk).update(status=m.RecoveryStatus.RESOLVED)
    f.rebind_to_new_workspace(lease)  # a Retry binds a fresh workspace (seed 001)
    f.HeartbeatRunFactory(issue=lease.issue, status=m.RunStatus.SUCCEEDED)
    reconcile()
    assert retirement_of(lease).kind == m.RetirementKind.CLOSED_RESTORE_SOURCE
    assert_retired(lease, local)


def test_done_task_warm_sandbox_is_retired_after_24h_and_not_before(warm, local, reconcile):
    young = warm(issue__status=m.IssueStatus.DONE, released_at=ago(hours=23))
    old = warm(issue__status=m.IssueStatus.DONE, released_at=ago(hours=25))
    undated = warm(issue__status=m.IssueStatus.DONE, released_at=None)
    reconcile()
    assert retirement_of(young).holds == [m.HoldCode.RETENTION]
    # Undated, and without a released_at no stop is confirmed either
    # (hasRemoteTerminationReceipt needs it: remote-execution-termination.ts @ 555fcfc, line 29).
    assert retirement_of(undated).holds == [m.HoldCode.NO_STOP_RECEIPT, m.HoldCode.UNKNOWN_AGE]
    assert_kept(young, local)
    assert_kept(undated, local)
    assert retirement_of(old).kind == m.RetirementKind.DONE_TASK_WARM
    assert_retired(old, local)
    # An hour later the young one is past its retention too.
    m.EnvironmentLease.objects.filter(pk=young.pk).update(released_at=ago(hours=25))
    reconcile()
    assert_retired(young, local)


def test_retention_follows_the_environment_policy(warm, local, reconcile):
    env = f.EnvironmentFactory(warm_retention=timedelta(hours=1))
    lease = warm(env=env, issue__status=m.IssueStatus.CANCELLED, released_at=ago(hours=2))
    reconcile()
    assert_retired(lease, local)


# --- seed 002: release by durable outcome ---------------------------------------------


@pytest.mark.parametrize("outcome", ["failed", "cancelled", "timed_out", "interrupted"])
def test_unsuccessful_run_kept_running_is_stopped_and_retained(outcome, warm, local, reconcile):
    lease = warm(
        status=m.LeaseStatus.RETAINED,
        disposition=m.Disposition.KEEP_RUNNING,
        heartbeat_run__status=outcome,
        receipt=False,
        stopped=False,
        released_at=None,
    )
    reconcile()
    lease.refresh_from_db()
    r = retirement_of(lease)
    assert r.kind == m.RetirementKind.STOP_AFTER_UNSUCCESSFUL_RUN
    assert local.inner.get(lease.provider_lease_id).state == "stopped"
    assert local.count("destroy") == 0
    # The console stopped it and marks the lease released; Paperclip's reported
    # disposition stays as evidence (DOMAIN §2.5). The record closes `corrected`.
    assert lease.disposition == m.Disposition.KEEP_RUNNING
    assert lease.status == m.LeaseStatus.RELEASED
    assert r.stage == m.Stage.CORRECTED
    kinds = set(r.receipts.values_list("kind", flat=True))
    assert {m.ReceiptKind.TERMINATION, m.ReceiptKind.STOP_AND_RETAIN} <= kinds
    # Stopped and retained, never destroyed: the task can resume it on a retry.
    reconcile()
    assert local.count("destroy") == 0
    assert local.inner.get(lease.provider_lease_id).state == "stopped"


def test_succeeded_warm_run_keeps_running(warm, local, reconcile):
    lease = warm(
        status=m.LeaseStatus.RETAINED,
        disposition=m.Disposition.KEEP_RUNNING,
        heartbeat_run__status=m.RunStatus.SUCCEEDED,
        receipt=False,
        stopped=False,
    )
    reconcile()
    assert retirement_of(lease) is None
    assert local.inner.get(lease.provider_lease_id).state == "started"
    assert local.calls == []


# --- seed 003: preservation source -----------------------------------------------------


def test_cancelled_run_on_a_stopped_reusable_sandbox_records_file_recovery_once(
    warm, local, reconcile
):
    lease = warm(heartbeat_run__status=m.RunStatus.CANCELLED, receipt=False)
    f.stop_and_retain(lease)
    ws = lease.execution_workspace
    ws.writer_run = lease.heartbeat_run
    ws.save()
    before = m.EnvironmentLease.objects.values().get(pk=lease.pk)
    receipts_before = list(m.Receipt.objects.filter(lease=lease).values_list("pk", flat=True))

    reconcile()
    reconcile()

    actions = m.RecoveryAction.objects.filter(lease=lease)
    assert actions.count() == 1
    action = actions.get()
    assert action.kind == "file_recovery" and action.status == m.RecoveryStatus.ACTIVE
    assert action.source_issue_id == lease.issue_id
    assert action.evidence["runId"] == str(lease.heartbeat_run_id)
    after = m.EnvironmentLease.objects.values().get(pk=lease.pk)
    assert {k: v for k, v in after.items() if k != "updated_at"} == {
        k: v for k, v in before.items() if k != "updated_at"
    }
    assert list(m.Receipt.objects.filter(lease=lease).values_list("pk", flat=True)) == (
        receipts_before
    )
    assert local.calls == []
    # Resolved later: a repeated pass records nothing again.
    actions.update(status=m.RecoveryStatus.RESOLVED)
    reconcile()
    assert m.RecoveryAction.objects.filter(lease=lease).count() == 1


# --- seed 004: resume replacement ------------------------------------------------------


def test_resume_failed_lease_is_retired(warm, local, reconcile):
    lease = warm(status=m.LeaseStatus.PENDING_CLEANUP, failure_reason="resume_failed")
    replacement = f.EnvironmentLeaseFactory(
        environment=lease.environment,
        issue=lease.issue,
        execution_workspace=lease.execution_workspace,
        status=m.LeaseStatus.ACTIVE,
        provider_lease_id="replacement-sbx",
        released_at=None,
    )
    reconcile()
    assert retirement_of(lease).kind == m.RetirementKind.RESUME_FAILED
    assert_retired(lease, local)
    replacement.refresh_from_db()
    assert replacement.status == m.LeaseStatus.ACTIVE


def test_saved_files_are_what_the_compare_compares(warm, local, reconcile):
    lease = warm(status=m.LeaseStatus.FAILED, files=SAVED)
    reconcile()
    compare = retirement_of(lease).receipts.get(kind=m.ReceiptKind.SALVAGE_COMPARE)
    assert compare.payload["clean"] is True
