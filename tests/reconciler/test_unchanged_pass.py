"""A pass over an unchanged fleet reuses the last listing (issue 16), and only then.

The skip must never be too eager: every write to a table the listing reads, a
warm retention ending, a claim expiring, other rules or an old listing make the
next pass list in full; and records due by the clock (backoff, notices) are
still claimed on a pass that reuses the listing (sandboxes/reconciler/changes.py).
"""

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sandboxes import models as m
from sandboxes.reconciler import changes
from sandboxes.reconciler.passes import run_pass
from tests import factories as f

from .conftest import ago

pytestmark = pytest.mark.django_db


def done_warm(*, receipt=True, released=timedelta(days=2), **kwargs):
    """A done task's warm sandbox, in an observe-mode environment (listed, never touched)."""
    env = kwargs.pop("environment", None) or f.EnvironmentFactory(
        retirement_mode=m.RetirementMode.OBSERVE
    )
    lease = f.EnvironmentLeaseFactory(
        environment=env,
        issue__status=m.IssueStatus.DONE,
        released_at=timezone.now() - released,
        **kwargs,
    )
    if receipt:
        f.stop_receipt(lease)
    return lease


def record_of(lease) -> m.Retirement:
    return m.Retirement.objects.get(lease=lease)


def settle(**kwargs) -> m.ReconcilerPass:
    """Run passes until one reuses the listing (the one after a listing that wrote lists again)."""
    for _ in range(4):
        record = run_pass(**kwargs)
        if record.listing.get("reused"):
            return record
    raise AssertionError("the listing was never reused on an unchanged fleet")


def test_an_unchanged_fleet_reuses_the_listing_and_reads_no_lease():
    lease = done_warm()
    first = run_pass()
    assert not first.listing["reused"] and first.candidates == 1
    settle()
    with CaptureQueriesContext(connection) as ctx:
        again = run_pass()
    sql = [q["sql"] for q in ctx.captured_queries]
    assert again.listing["reused"] and again.candidates == 1
    assert not any("sandboxes_environmentlease" in q for q in sql), sql
    writes = [q for q in sql if q.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]
    assert writes and all('"sandboxes_reconcilerpass"' in q for q in writes), writes
    # Start and finish of the pass row, the previous listing, the change check,
    # sizes, one claim attempt, the two summaries.
    assert len(sql) <= 12, sql
    assert record_of(lease).stage == m.Stage.LISTED


def _export(lease):
    f.PendingExportFactory(lease=lease)


def _intent(lease):
    f.LeaseIntentFactory(lease=lease)


def _run_on_task(lease):
    f.HeartbeatRunFactory(issue=lease.issue, status=m.RunStatus.QUEUED)


def _recovery_on_task(lease):
    m.RecoveryAction.objects.create(
        source_issue=lease.issue, kind="workspace_restore", status=m.RecoveryStatus.ACTIVE
    )


def _writer(lease):
    m.ExecutionWorkspace.objects.filter(pk=lease.execution_workspace_id).update(
        writer_run_id=lease.heartbeat_run_id
    )


def _retention(lease):
    m.Environment.objects.filter(pk=lease.environment_id).update(warm_retention=timedelta(days=30))


def _operator(lease):
    m.Retirement.objects.filter(lease=lease).update(operator_hold_reason="keep for the demo")


def _undated(lease):
    m.EnvironmentLease.objects.filter(pk=lease.pk).update(acquired_at=None)


def _receipt_arrives(lease):
    f.stop_receipt(lease)


# (change, table it writes, hold it brings or removes)
CHANGES = [
    (_export, "pendingexport", m.HoldCode.EXPORT_PENDING),
    (_intent, "leaseintent", m.HoldCode.INTENT_PENDING),
    (_run_on_task, "heartbeatrun", m.HoldCode.ISSUE_RUN_ACTIVE),
    (_recovery_on_task, "recoveryaction", m.HoldCode.RECOVERY_OPEN),
    (_writer, "executionworkspace", m.HoldCode.WRITER_ACTIVE),
    (_retention, "environment", m.HoldCode.RETENTION),
    (_operator, "retirement", m.HoldCode.OPERATOR_HOLD),
    (_undated, "environmentlease", m.HoldCode.UNKNOWN_AGE),
    (_receipt_arrives, "receipt", m.HoldCode.NO_STOP_RECEIPT),
]


@pytest.mark.parametrize(
    ("change", "hold"), [(c, h) for c, _, h in CHANGES], ids=[t for _, t, _ in CHANGES]
)
def test_a_write_to_any_table_the_listing_reads_is_noticed(change, hold):
    receipt_case = change is _receipt_arrives
    lease = done_warm(receipt=not receipt_case)
    settle()
    assert (hold in record_of(lease).holds) is receipt_case
    change(lease)
    record = run_pass()
    assert not record.listing["reused"]
    assert (hold in record_of(lease).holds) is not receipt_case
    settle()


def test_the_task_resuming_is_noticed_and_dismisses_the_record():
    lease = done_warm()
    settle()
    m.Issue.objects.filter(pk=lease.issue_id).update(status=m.IssueStatus.IN_PROGRESS)
    assert not run_pass().listing["reused"]
    assert record_of(lease).stage == m.Stage.DISMISSED


def test_a_retention_ending_is_noticed_with_nothing_written(monkeypatch):
    """Fails if the skip ignores time: the retention ends while nothing changes."""
    lease = done_warm(released=timedelta(hours=24) - timedelta(minutes=5))
    settle()
    rec = record_of(lease)
    assert rec.holds == [m.HoldCode.RETENTION] and rec.stage == m.Stage.HELD
    ends = lease.released_at + timedelta(hours=24)
    assert m.ReconcilerPass.objects.first().listing["due"] == ends.isoformat()

    monkeypatch.setattr(timezone, "now", lambda: ends - timedelta(minutes=1))
    assert run_pass().listing["reused"]
    assert record_of(lease).stage == m.Stage.HELD

    monkeypatch.setattr(timezone, "now", lambda: ends + timedelta(seconds=1))
    assert not run_pass().listing["reused"]
    rec = record_of(lease)
    assert rec.holds == [] and rec.stage == m.Stage.LISTED


def test_a_claim_expiring_is_noticed_with_nothing_written(monkeypatch):
    """A claimed record is left to its worker; when the claim runs out with
    nothing written, the next listing must judge it again."""
    lease = done_warm()
    settle()
    until = timezone.now() + timedelta(minutes=3)
    m.Retirement.objects.filter(lease=lease).update(claimed_until=until, attempt_id=uuid.uuid4())
    f.PendingExportFactory(lease=lease)
    run_pass()  # the holds are refreshed, but the stage is the worker's
    assert record_of(lease).stage == m.Stage.LISTED
    assert settle().listing["due"] == until.isoformat()

    monkeypatch.setattr(timezone, "now", lambda: until + timedelta(seconds=1))
    assert not run_pass().listing["reused"]
    assert record_of(lease).stage == m.Stage.HELD


def test_a_record_due_by_the_clock_is_worked_on_a_reused_listing(warm, local, monkeypatch):
    """Backoff and notices are the claim loop's, which runs on every pass."""
    lease = warm(issue__status=m.IssueStatus.DONE, released_at=ago(hours=30))
    later = timezone.now() + timedelta(minutes=2)
    f.RetirementFactory(
        lease=lease,
        kind=m.RetirementKind.DONE_TASK_WARM,
        stage=m.Stage.FAILED,
        next_attempt_at=later,
        attempts=1,
    )
    settle(provider_for=lambda env: local)
    assert record_of(lease).stage == m.Stage.FAILED and not local.count("destroy")

    monkeypatch.setattr(timezone, "now", lambda: later + timedelta(seconds=1))
    record = run_pass(provider_for=lambda env: local)
    assert record.listing["reused"]
    assert record.advanced >= 1
    assert record_of(lease).stage == m.Stage.RETIRED and local.count("destroy") == 1


def test_other_rules_or_an_old_listing_list_again(monkeypatch):
    done_warm()
    settle()
    monkeypatch.setattr(changes, "RULES_VERSION", "a-new-deploy")
    assert not run_pass().listing["reused"]
    assert run_pass().listing["reused"]
    later = timezone.now() + changes.RELIST_AFTER
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert not run_pass().listing["reused"]


def test_scopes_reuse_only_their_own_listing():
    lease = done_warm()
    env = lease.environment
    settle()
    f.PendingExportFactory(lease=lease)
    # The environment's own first pass lists; the whole-fleet pass still sees the change.
    assert not run_pass(environment=env).listing["reused"]
    assert not run_pass().listing["reused"]
    assert m.HoldCode.EXPORT_PENDING in record_of(lease).holds


@pytest.mark.django_db(transaction=True)
def test_a_write_committed_after_the_listing_started_is_noticed():
    """A writer that began before a listing and commits after it: its rows were
    invisible to the listing, so the next pass must list (a counter read before
    the listing would already include it, and skip)."""
    lease = done_warm()
    settle()
    begun, listed = threading.Event(), threading.Event()

    def writer():
        try:
            with transaction.atomic():
                f.PendingExportFactory(lease=m.EnvironmentLease.objects.get(pk=lease.pk))
                begun.set()
                listed.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=writer)
    thread.start()
    begun.wait(30)
    # Another write commits meanwhile, after the export's: the listing lists, and
    # the highest change it sees is newer than the export's.
    m.Issue.objects.filter(pk=lease.issue_id).update(title="renamed")
    during = run_pass()
    assert not during.listing["reused"]
    assert m.HoldCode.EXPORT_PENDING not in record_of(lease).holds  # not committed yet
    listed.set()
    thread.join(30)
    after = run_pass()
    assert not after.listing["reused"]
    assert m.HoldCode.EXPORT_PENDING in record_of(lease).holds


def test_pruning_keeps_what_a_recent_listing_still_compares_with():
    """The change log is pruned against a listing older than PRUNE_AFTER; a
    younger listing still sees every change after it."""
    lease = done_warm()
    old = run_pass()
    m.ReconcilerPass.objects.filter(pk=old.pk).update(
        started_at=timezone.now() - changes.PRUNE_AFTER - timedelta(minutes=1)
    )
    settle()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM console_change")
        before = cursor.fetchone()[0]
    changes.prune(timezone.now())  # the same transaction's own rows stay
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM console_change")
        assert 1 <= cursor.fetchone()[0] <= before
    assert run_pass().listing["reused"]
    f.PendingExportFactory(lease=lease)
    assert not run_pass().listing["reused"]
    assert m.HoldCode.EXPORT_PENDING in record_of(lease).holds


def _own_change_row() -> tuple[int, str]:
    """This transaction's change-log row: its bump and its tuple's place (a
    rewrite puts the new version elsewhere)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT bump, ctid::text FROM console_change WHERE xid = pg_current_xact_id()"
        )
        return cursor.fetchone()


def test_a_transaction_that_does_not_list_keeps_one_change_row_version():
    """Migration 0016: a bulk load is one transaction of many statements; each
    rewrite of its change-log row left a version nobody could prune until the
    end, and every later statement walked them all (quadratic over a file)."""
    f.EnvironmentFactory()
    first = _own_change_row()
    for _ in range(5):
        f.IssueFactory()
    assert _own_change_row() == first  # same bump, same tuple: never rewritten


def test_a_write_after_a_listing_in_the_same_transaction_is_noticed_once():
    f.EnvironmentFactory()
    start = changes.mark()
    before = _own_change_row()
    f.IssueFactory()
    after = _own_change_row()
    assert after[0] > start["bump"] >= before[0]  # the listing's own transaction sees it
    state = {**changes.listing_state(start, timezone.now(), None, 0)}
    assert not changes.still_current(state, timezone.now())
    f.IssueFactory()
    assert _own_change_row() == after  # once is enough until the next listing
    again = changes.mark()
    f.IssueFactory()
    assert _own_change_row()[0] > again["bump"]


@pytest.mark.django_db(transaction=True)
def test_the_listing_note_ends_with_its_transaction():
    with transaction.atomic():
        changes.mark()
    with transaction.atomic():
        f.EnvironmentFactory()
        first = _own_change_row()
        f.IssueFactory()
        assert _own_change_row() == first
