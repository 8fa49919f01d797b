"""Listing: one row per sandbox (the newest), each kind, placeholders skipped, and
a query count that does not grow with the fleet."""

from datetime import UTC, datetime

import pytest
from django.utils import timezone

from sandboxes import models as m
from sandboxes.reconciler import candidates
from sandboxes.reconciler.candidates import judge_leases, list_candidates
from sandboxes.reconciler.listing import evaluate_fleet, sync_retirements
from tests import factories as f

from .conftest import ago

pytestmark = pytest.mark.django_db


def kinds():
    return {c.provider_lease_id: c.kind for c in list_candidates()}


def one_of_each():
    """A lease per candidate kind plus a kept one; returns {kind: lease}."""
    out = {}
    lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
    f.stop_receipt(lease)
    out["abandoned_warm"] = lease
    lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.RETAINED, released_at=None)
    f.rebind_to_new_workspace(lease)
    out["superseded_running_warm"] = lease
    lease = f.EnvironmentLeaseFactory(
        status=m.LeaseStatus.FAILED, lease_policy=m.LeasePolicy.RETAIN_ON_FAILURE
    )
    f.RecoveryActionFactory(lease=lease, status=m.RecoveryStatus.RESOLVED)
    f.stop_receipt(lease)
    f.rebind_to_new_workspace(lease)  # the task moved on (DOMAIN §2.1)
    out["closed_restore_source"] = lease
    lease = f.EnvironmentLeaseFactory(issue__status=m.IssueStatus.DONE, released_at=ago(hours=30))
    f.stop_receipt(lease)
    out["done_task_warm"] = lease
    out["resume_failed"] = f.EnvironmentLeaseFactory(
        status=m.LeaseStatus.PENDING_CLEANUP, failure_reason="resume_failed"
    )
    out["stop_after_unsuccessful_run"] = f.EnvironmentLeaseFactory(
        status=m.LeaseStatus.RETAINED,
        disposition=m.Disposition.KEEP_RUNNING,
        heartbeat_run__status=m.RunStatus.TIMED_OUT,
    )
    f.EnvironmentLeaseFactory()  # released, bound here: the task can resume it
    return out


def test_each_kind_is_listed_by_its_rule():
    leases = one_of_each()
    assert kinds() == {lease.provider_lease_id: kind for kind, lease in leases.items()}
    assert set(kinds().values()) == {k.value for k in m.RetirementKind}


def test_only_the_newest_row_per_sandbox_is_judged():
    old = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED, acquired_at=ago(days=2))
    f.EnvironmentLeaseFactory(
        provider_lease_id=old.provider_lease_id,
        environment=old.environment,
        status=m.LeaseStatus.RELEASED,
        acquired_at=ago(days=1),
    )
    assert old.provider_lease_id not in kinds()


def test_of_two_rows_acquired_at_the_same_moment_the_larger_id_is_judged():
    """Neither row is superseded (a tie): the listing reads newer_lease instead of
    filtering on it, and drops the row that has one."""
    first = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
    second = f.EnvironmentLeaseFactory(
        provider_lease_id=first.provider_lease_id,
        environment=first.environment,
        status=m.LeaseStatus.FAILED,
        acquired_at=first.acquired_at,
    )
    newest = max(first.pk, second.pk)
    assert [c.lease_id for c in list_candidates()] == [newest]
    assert judge_leases([min(first.pk, second.pk)]).popitem()[1].facts.newer_lease is True


def test_the_listing_reads_the_rows_django_would():
    """_fetch skips Django's per-value converters and reads timestamps with
    psycopg's own loader: same values, same types, same time zone."""
    one_of_each()
    f.EnvironmentLeaseFactory(status=m.LeaseStatus.RELEASED, released_at=None, acquired_at=None)
    rows = candidates._listable().values_list(*candidates.FACT_FIELDS).order_by("pk")
    fetched = candidates._fetch(rows)
    assert fetched and fetched == list(rows)
    assert [[type(v) for v in row] for row in fetched] == [[type(v) for v in row] for row in rows]
    stamps = [v for row in fetched for v in row if isinstance(v, datetime)]
    assert stamps and all(v.tzinfo is UTC for v in stamps)


def test_rows_whose_graph_has_placeholders_are_skipped():
    lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
    m.HeartbeatRun.objects.filter(pk=lease.heartbeat_run_id).update(placeholder=True)
    assert kinds() == {}


def test_a_resumed_task_dismisses_its_record():
    lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.RELEASED)
    f.stop_receipt(lease)
    f.rebind_to_new_workspace(lease)
    sync_retirements()
    r = m.Retirement.objects.get()
    assert r.kind == "abandoned_warm"
    # The task is bound to the old workspace again (it resumed it).
    lease.issue.bound_workspace = lease.execution_workspace
    lease.issue.save()
    result = sync_retirements()
    r.refresh_from_db()
    assert result.dismissed == 1 and r.stage == m.Stage.DISMISSED
    assert m.AuditEvent.objects.filter(action="retirement.dismissed", object_id=str(r.pk)).exists()


def test_sync_is_idempotent_and_holds_are_stored_with_explanations():
    lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)  # no stop receipt
    sync_retirements()
    sync_retirements()
    r = m.Retirement.objects.get()
    assert r.stage == m.Stage.HELD
    assert r.holds == ["no_stop_receipt"]
    assert "stop receipt" in r.hold_reasons["no_stop_receipt"]
    f.stop_receipt(lease)
    sync_retirements()
    r.refresh_from_db()
    assert r.stage == m.Stage.LISTED and r.holds == [] and r.next_attempt_at is not None


def fleet(n):
    for _ in range(n):
        one_of_each()
        lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
        f.HeartbeatRunFactory(issue=lease.issue, status=m.RunStatus.RUNNING)
        f.PendingExportFactory(lease=lease)
        f.LeaseIntentFactory(lease=lease)


@pytest.mark.parametrize("size", [1, 12])
def test_listing_and_holds_use_a_fixed_number_of_queries(size, django_assert_max_num_queries):
    fleet(size)
    # BEGIN, SET LOCAL jit, the candidate SELECT, COMMIT, the open records.
    with django_assert_max_num_queries(5):
        evaluated = evaluate_fleet()
    assert len(evaluated) == 7 * size
    # The sync writes in bulk too: the same bound at every size.
    with django_assert_max_num_queries(16):
        sync_retirements()
    with django_assert_max_num_queries(16):
        sync_retirements()


def test_the_query_count_is_the_same_at_every_fleet_size():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = []
    for size in (1, 5, 20):
        fleet(size)
        with CaptureQueriesContext(connection) as ctx:
            evaluate_fleet()
        counts.append(len(ctx.captured_queries))
        sync_retirements()
        with CaptureQueriesContext(connection) as ctx:
            sync_retirements()  # steady state
        counts.append(len(ctx.captured_queries))
    assert counts[0::2] == [counts[0]] * 3
    assert counts[1::2] == [counts[1]] * 3


def _retire_concurrently(record):
    """What another worker's final fenced write commits: record retired, lease expired."""
    m.EnvironmentLease.objects.filter(pk=record.lease_id).update(
        status=m.LeaseStatus.EXPIRED, cleanup_status=m.CleanupStatus.SUCCESS
    )
    m.Retirement.objects.filter(pk=record.pk).update(
        stage=m.Stage.RETIRED, closed_at=timezone.now(), next_attempt_at=None
    )


@pytest.mark.parametrize("between", ["before_open_records", "after_open_records"])
def test_a_retirement_committed_during_the_listing_never_lists_the_sandbox_again(
    between, monkeypatch
):
    """Chaos seed 100: a sandbox was destroyed and its record retired, yet a second
    record appeared for it and ended `dismissed`. A listing read the candidates
    before another worker's retirement committed and the open records after it."""
    from sandboxes.reconciler import listing

    lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
    f.stop_receipt(lease)
    sync_retirements()
    record = m.Retirement.objects.get(lease=lease)
    real = listing._open_records

    def open_records(environment_id=None):
        if between == "before_open_records":
            _retire_concurrently(record)
            return real(environment_id)
        rows = real(environment_id)
        _retire_concurrently(record)
        return rows

    monkeypatch.setattr(listing, "_open_records", open_records)
    sync_retirements()
    monkeypatch.undo()
    sync_retirements()
    assert list(m.Retirement.objects.values_list("stage", flat=True)) == [m.Stage.RETIRED]


def test_a_lease_with_a_retired_record_is_never_listed_again():
    lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
    f.stop_receipt(lease)
    sync_retirements()
    m.Retirement.objects.filter(lease=lease).update(stage=m.Stage.RETIRED, closed_at=timezone.now())
    # The mirror replays an old row: the destroyed sandbox's lease looks kept again.
    sync_retirements()
    assert m.Retirement.objects.filter(lease=lease).count() == 1


# --- newest row per sandbox when a row has no acquired_at (review finding 2) --------------


def test_a_row_without_acquired_at_on_the_same_sandbox_holds_the_dated_row():
    """Issue 10 item 9: the sandbox stays visible, held (main: it vanished)."""
    old = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
    f.stop_receipt(old)
    # A row (from the mirror, say) that cannot be dated: released and bound to its
    # task's workspace, so the task can resume the sandbox.
    f.EnvironmentLeaseFactory(
        provider_lease_id=old.provider_lease_id,
        environment=old.environment,
        status=m.LeaseStatus.RELEASED,
        acquired_at=None,
    )
    [e] = evaluate_fleet()
    assert e.candidate.lease_id == old.pk
    assert {"task_can_resume", "unknown_age"} <= set(e.holds)


def test_an_undated_row_is_not_judged_against_a_dated_row_on_its_sandbox():
    undated = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED, acquired_at=None)
    f.stop_receipt(undated)
    dated = f.EnvironmentLeaseFactory(
        provider_lease_id=undated.provider_lease_id,
        environment=undated.environment,
        status=m.LeaseStatus.FAILED,
    )
    f.stop_receipt(dated)
    [e] = evaluate_fleet()
    assert e.candidate.lease_id == dated.pk
    assert "unknown_age" in e.holds
    assert judge_leases([undated.pk])[undated.pk].facts.newer_lease is True


def test_the_only_row_of_a_sandbox_without_acquired_at_is_held_unknown_age():
    lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED, acquired_at=None)
    f.stop_receipt(lease)
    [e] = evaluate_fleet()
    assert e.candidate.lease_id == lease.pk
    assert e.holds == ["unknown_age"]


# --- the stop receipt must be for this lease, run and sandbox (review finding 3) ----------


def _holds_of(lease):
    return {e.candidate.lease_id: e.holds for e in evaluate_fleet()}[lease.pk]


def test_a_stop_receipt_naming_another_sandbox_is_no_stop_receipt():
    lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
    f.stop_receipt(lease, provider_lease_id="some-other-sandbox")
    assert "no_stop_receipt" in _holds_of(lease)
    f.stop_receipt(lease)
    assert "no_stop_receipt" not in _holds_of(lease)


def test_a_stop_receipt_on_an_earlier_run_of_the_lease_is_no_stop_receipt():
    lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
    earlier = f.HeartbeatRunFactory(issue=lease.issue, status=m.RunStatus.SUCCEEDED)
    f.stop_receipt(lease, run=earlier)
    assert "no_stop_receipt" in _holds_of(lease)
    f.stop_receipt(lease)
    assert "no_stop_receipt" not in _holds_of(lease)
