"""A pass costs what is kept and what changed, not history (issue 16).

- `EnvironmentLease.superseded` is kept by the database on every write path;
  it only ever marks rows the listing would skip anyway.
- Listing, sync and a whole pass use the same number of queries on a small and
  a larger year-of-history fleet (devtools.bench_fleet, the benchmark's own).
- A pass over an unchanged fleet writes nothing but its ReconcilerPass row; a
  change writes only that difference.
"""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from devtools.bench_fleet import build_fleet
from sandboxes import models as m
from sandboxes.reconciler.listing import evaluate_fleet, sync_retirements
from sandboxes.reconciler.passes import run_pass
from sandboxes.rules.holds import STOP_ONLY_KINDS
from tests import factories as f

pytestmark = pytest.mark.django_db


def expected_superseded() -> dict:
    """The flag as the rule defines it, recomputed from scratch in Python."""
    rows = list(
        m.EnvironmentLease.objects.values("id", "provider", "provider_lease_id", "acquired_at")
    )
    newest: dict = {}
    for r in rows:
        key = (r["provider"], r["provider_lease_id"])
        if r["acquired_at"] is not None and (key not in newest or r["acquired_at"] > newest[key]):
            newest[key] = r["acquired_at"]
    return {
        r["id"]: r["acquired_at"] is not None
        and r["acquired_at"] < newest.get((r["provider"], r["provider_lease_id"]), r["acquired_at"])
        for r in rows
    }


def stored_superseded() -> dict:
    return dict(m.EnvironmentLease.objects.values_list("id", "superseded"))


def flags(*leases) -> list[bool]:
    stored = stored_superseded()
    return [stored[lease.pk] for lease in leases]


def test_superseded_follows_inserts_updates_and_deletes():
    now = timezone.now()
    a = f.EnvironmentLeaseFactory(provider_lease_id="sbx-a", acquired_at=now - timedelta(hours=5))
    env = a.environment
    b = f.EnvironmentLeaseFactory(
        environment=env, provider_lease_id="sbx-a", acquired_at=now - timedelta(hours=1)
    )
    assert flags(a, b) == [True, False]
    # An older row arriving late is history at once.
    c = f.EnvironmentLeaseFactory(
        environment=env, provider_lease_id="sbx-a", acquired_at=now - timedelta(days=3)
    )
    assert flags(a, b, c) == [True, False, True]
    # Undated rows and ties are never flagged (the listing judges them in full).
    d = f.EnvironmentLeaseFactory(environment=env, provider_lease_id="sbx-a", acquired_at=None)
    e = f.EnvironmentLeaseFactory(
        environment=env, provider_lease_id="sbx-a", acquired_at=b.acquired_at
    )
    assert flags(a, b, c, d, e) == [True, False, True, False, False]
    # b moves back in time: a and e are the newest rows now.
    m.EnvironmentLease.objects.filter(pk__in=[b.pk, e.pk]).update(
        acquired_at=now - timedelta(days=1)
    )
    assert flags(a, b, c, e) == [False, True, True, True]
    # a moves to another sandbox: both sandboxes are recomputed.
    m.EnvironmentLease.objects.filter(pk=a.pk).update(provider_lease_id="sbx-b")
    assert flags(a, b, c, e) == [False, False, True, False]
    # Deleting the newest row makes the next one newest.
    m.EnvironmentLease.objects.filter(pk__in=[b.pk, e.pk]).delete()
    assert flags(a, c) == [False, False]
    assert stored_superseded() == expected_superseded()


def test_a_stale_flag_written_back_by_a_save_is_recomputed():
    """A model loaded before a newer row arrived still says superseded=False;
    saving it must not make that stick."""
    now = timezone.now()
    old = f.EnvironmentLeaseFactory(acquired_at=now - timedelta(days=2))
    f.EnvironmentLeaseFactory(
        environment=old.environment,
        provider_lease_id=old.provider_lease_id,
        acquired_at=now,
    )
    assert old.superseded is False  # the in-memory copy is stale
    old.status = m.LeaseStatus.EXPIRED
    old.save()
    assert flags(old) == [True]
    m.EnvironmentLease.objects.filter(pk=old.pk).update(superseded=False)
    assert flags(old) == [True]


def test_superseded_follows_the_ingest_upsert():
    """INSERT … ON CONFLICT DO UPDATE, as ingest and the mirror write leases."""
    now = timezone.now()
    a = f.EnvironmentLeaseFactory(acquired_at=now - timedelta(hours=2))
    b = m.EnvironmentLease(
        id=a.pk,
        environment=a.environment,
        provider=a.provider,
        provider_lease_id=a.provider_lease_id,
        status=a.status,
        lease_policy=a.lease_policy,
        acquired_at=now - timedelta(days=9),
    )
    newer = m.EnvironmentLease(
        environment=a.environment,
        provider=a.provider,
        provider_lease_id=a.provider_lease_id,
        status=m.LeaseStatus.ACTIVE,
        lease_policy=a.lease_policy,
        acquired_at=now - timedelta(days=5),
    )
    m.EnvironmentLease.objects.bulk_create(
        [b, newer],
        update_conflicts=True,
        unique_fields=["id"],
        update_fields=["acquired_at", "updated_at"],
    )
    assert flags(a, newer) == [True, False]
    assert stored_superseded() == expected_superseded()


def test_the_refresh_takes_no_lock_table_entry_per_sandbox():
    """A load_events file is one transaction. The refresh locked each sandbox with
    an advisory lock, which stays in PostgreSQL's shared lock table until commit:
    a file naming ~28,000 sandboxes failed with "out of shared memory". Row locks
    live in the rows: the lock-table entries this transaction holds do not grow
    with the sandboxes it writes (fails on main before migration 0012: 2,000)."""
    env = f.EnvironmentFactory()
    now = timezone.now()

    def held() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()")
            return cursor.fetchone()[0]

    before = held()
    m.EnvironmentLease.objects.bulk_create(
        [
            m.EnvironmentLease(
                environment=env,
                provider=env.provider,
                provider_lease_id=f"sbx-many-{i}",
                status=m.LeaseStatus.EXPIRED,
                lease_policy=m.LeasePolicy.EPHEMERAL,
                acquired_at=now - timedelta(minutes=i),
            )
            for i in range(2000)
        ]
    )
    assert held() - before < 50
    older = m.EnvironmentLease.objects.get(provider_lease_id="sbx-many-7")
    m.EnvironmentLease.objects.create(
        environment=env,
        provider=env.provider,
        provider_lease_id="sbx-many-7",
        status=m.LeaseStatus.ACTIVE,
        lease_policy=m.LeasePolicy.EPHEMERAL,
        acquired_at=now,
    )
    assert flags(older) == [True]


def test_the_benchmark_fleet_sets_the_flag_as_the_database_would():
    build_fleet(leases=1500, kept=40, seed=3)
    assert stored_superseded() == expected_superseded()
    assert m.EnvironmentLease.objects.filter(superseded=True).exists()


def _pass_queries() -> tuple[int, int, int]:
    with CaptureQueriesContext(connection) as listing:
        evaluate_fleet()
    sync_retirements()
    with CaptureQueriesContext(connection) as sync:
        sync_retirements()
    run_pass()
    with CaptureQueriesContext(connection) as whole:
        run_pass()
    return len(listing), len(sync), len(whole)


def test_query_count_does_not_grow_with_the_fleet():
    build_fleet(leases=1200, kept=30, seed=5, prefix="small")
    small = _pass_queries()
    candidates = m.Retirement.objects.count()
    build_fleet(leases=6000, kept=150, seed=6, prefix="large")
    large = _pass_queries()
    assert m.Retirement.objects.count() > candidates * 3
    assert small == large


def _writes(ctx) -> list[str]:
    return [
        q["sql"]
        for q in ctx.captured_queries
        if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
    ]


def test_a_pass_over_an_unchanged_fleet_writes_only_its_pass_row():
    build_fleet(leases=2000, kept=60, seed=7)
    run_pass()  # lists every candidate
    held = m.Retirement.objects.filter(stage=m.Stage.HELD)
    assert held.exists() and m.Retirement.objects.filter(stage=m.Stage.LISTED).exists()
    m.Retirement.objects.filter(pk=held.first().pk).update(operator_hold_reason="keep it")
    run_pass()  # settles the operator hold
    with CaptureQueriesContext(connection) as ctx:
        record = run_pass()
    writes = _writes(ctx)
    assert record.candidates == m.Retirement.objects.count()
    assert writes and all('"sandboxes_reconcilerpass"' in sql for sql in writes), writes


def test_a_change_writes_only_its_difference_in_one_statement():
    build_fleet(leases=2000, kept=60, seed=8)
    run_pass()
    run_pass()
    record = (
        m.Retirement.objects.filter(stage=m.Stage.LISTED)
        .exclude(kind__in=STOP_ONLY_KINDS)  # holds do not block a stop
        .first()
    )
    m.PendingExport.objects.create(lease_id=record.lease_id, state=m.ExportState.PENDING)
    with CaptureQueriesContext(connection) as ctx:
        run_pass()
    writes = [sql for sql in _writes(ctx) if '"sandboxes_reconcilerpass"' not in sql]
    record.refresh_from_db()
    assert "export_pending" in record.holds and record.stage == m.Stage.HELD
    # One bulk update of the holds, one of the stage: never a write per record.
    assert len(writes) == 2, writes
    assert all(str(record.pk).replace("-", "") in sql.replace("-", "") for sql in writes)
