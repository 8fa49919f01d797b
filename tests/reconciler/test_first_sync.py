"""The first sync: the records it creates go in one set-based statement on
PostgreSQL (sandboxes/reconciler/new_records.py), in a number of queries that
does not grow with the candidates, and are the records the ORM path makes:
same fields, holds and hold lines, the same `retired` filter, conflicts
ignored, the same ids returned."""

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from devtools.bench_fleet import build_fleet
from sandboxes import models as m
from sandboxes.reconciler import candidates, new_records, predicates
from sandboxes.reconciler.listing import sync_retirements
from tests import factories as f

pytestmark = pytest.mark.django_db

# What differs between two syncs that create the same records.
UNSTAMPED = {"id", "listed_at", "updated_at"}


def _warm(n: int) -> None:
    """n candidates of each shape a first sync treats apart: a confirmed stop
    (no hold), a termination receipt Paperclip's predicate refuses (held, its
    line says why), and no receipt at all (held)."""
    for _ in range(n):
        f.stop_receipt(f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED))
        refused = f.EnvironmentLeaseFactory(
            status=m.LeaseStatus.FAILED, cleanup_status=m.CleanupStatus.PENDING
        )
        f.ReceiptFactory(lease=refused)
        f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)


def _first_sync_queries() -> tuple[int, int, list[str]]:
    m.Retirement.objects.all().delete()
    with CaptureQueriesContext(connection) as ctx:
        result = sync_retirements()
    sql = [q["sql"] for q in ctx.captured_queries]
    return len(sql), result.created, [q for q in sql if "INSERT INTO" in q]


def test_the_first_sync_takes_the_same_queries_for_3_and_60_candidates():
    _warm(1)
    few, created_few, _ = _first_sync_queries()
    _warm(19)
    many, created_many, inserts = _first_sync_queries()
    assert (created_few, created_many) == (3, 60)
    assert few == many
    assert len(inserts) == 1  # the records, set-based (on PostgreSQL)


def _records() -> dict:
    rows = m.Retirement.objects.values()
    return {
        (r["provider"], r["provider_lease_id"]): {k: v for k, v in r.items() if k not in UNSTAMPED}
        for r in rows
    }


def _sync(monkeypatch, *, orm: bool, now):
    m.Retirement.objects.exclude(stage=m.Stage.RETIRED).delete()
    with monkeypatch.context() as patch:
        if orm:
            patch.setattr(new_records, "insert", new_records.create_orm)
        result = sync_retirements(now=now)
    return result, _records()


def test_the_records_are_the_ones_the_orm_path_makes(monkeypatch):
    build_fleet(leases=1500, kept=40, seed=3)
    _warm(2)
    # A lease whose record on this very sandbox was retired is not listed again.
    retired = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
    f.RetirementFactory(lease=retired, stage=m.Stage.RETIRED, closed_at=timezone.now())
    now = timezone.now()
    by_orm, orm_records = _sync(monkeypatch, orm=True, now=now)
    by_sql, sql_records = _sync(monkeypatch, orm=False, now=now)
    assert sql_records == orm_records
    assert by_sql.created == by_orm.created == len(by_sql.listed_ids) > 20
    assert set(by_sql.listed_ids) == {
        str(pk)
        for pk in m.Retirement.objects.exclude(stage=m.Stage.RETIRED).values_list("pk", flat=True)
    }
    assert by_sql.by_kind == by_orm.by_kind
    assert by_sql.due_at == by_orm.due_at
    # The fleet has held records, their lines, and lines naming a refusal.
    reasons = [r["hold_reasons"] for r in sql_records.values()]
    assert any(r["holds"] for r in sql_records.values())
    assert any("cleanup_status" in line for lines in reasons for line in lines.values())
    assert m.Retirement.objects.filter(lease=retired).count() == 1  # only the retired one


def _row(lease, sandbox: str | None = None) -> dict:
    return {
        "id": uuid.uuid4(),
        "lease_id": lease.pk,
        "environment_id": lease.environment_id,
        "provider": lease.provider,
        "provider_lease_id": sandbox or lease.provider_lease_id,
        "kind": m.RetirementKind.ABANDONED_WARM,
        "stage": m.Stage.HELD,
        "holds": ["no_stop_receipt"],
        "hold_reasons": {"no_stop_receipt": "Stop not confirmed."},
        "next_attempt_at": None,
    }


@pytest.mark.parametrize("orm", [True, False], ids=["orm", "sql"])
def test_a_conflict_is_ignored_and_its_id_still_returned(monkeypatch, orm):
    """Another sync created the sandbox's open record meanwhile: nothing is
    written for it, no error, and (as bulk_create's ignore_conflicts) its id
    is among those returned; the other row is written with the model's
    defaults for the rest."""
    if orm:
        monkeypatch.setattr(new_records, "insert", new_records.create_orm)
    taken = f.RetirementFactory().lease
    free = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
    rows = [_row(taken), _row(free)]
    assert new_records.create(rows) == [str(r["id"]) for r in rows]
    assert m.Retirement.objects.filter(provider_lease_id=taken.provider_lease_id).count() == 1
    made = m.Retirement.objects.get(pk=rows[1]["id"])
    assert (made.holds, made.hold_reasons, made.operator_hold_reason, made.attempts) == (
        ["no_stop_receipt"],
        {"no_stop_receipt": "Stop not confirmed."},
        "",
        0,
    )
    assert abs(made.updated_at - made.listed_at).total_seconds() < 1


@pytest.mark.parametrize("orm", [True, False], ids=["orm", "sql"])
def test_a_lease_retired_on_its_sandbox_is_not_listed_again(monkeypatch, orm):
    """Unless the lease names another sandbox now (a lease moved since)."""
    if orm:
        monkeypatch.setattr(new_records, "insert", new_records.create_orm)
    lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
    f.RetirementFactory(lease=lease, stage=m.Stage.RETIRED, closed_at=timezone.now())
    rows = [_row(lease), _row(lease, sandbox="sbx-moved")]
    assert new_records.create(rows) == [str(rows[1]["id"])]
    assert list(
        m.Retirement.objects.exclude(stage=m.Stage.RETIRED).values_list("pk", flat=True)
    ) == [rows[1]["id"]]


def test_the_stop_refusals_read_the_rows_django_would():
    """The refusals' rows come through candidates.fetch_rows (psycopg's own
    loaders): the same values and types as Django's, JSON included."""
    lease = f.EnvironmentLeaseFactory(
        status=m.LeaseStatus.FAILED,
        cleanup_status=m.CleanupStatus.PENDING,
        metadata={"pluginId": "p", "n": [1, 2.5, None]},
    )
    f.ReceiptFactory(lease=lease, payload={"provider": "daytona", "nested": {"a": "b"}})
    rows = m.Receipt.objects.filter(lease=lease, kind=m.ReceiptKind.TERMINATION).values_list(
        *predicates._ROW_FIELDS
    )
    fetched = candidates.fetch_rows(rows)
    assert fetched and fetched == list(rows)
    assert [[type(v) for v in row] for row in fetched] == [[type(v) for v in row] for row in rows]
    assert predicates.stop_refusals([lease.pk]) == {
        lease.pk: "the lease's cleanup_status is pending, not success"
    }
