"""The superseded flag's trigger (migrations 0009, 0012, 0015, 0029, 0030) on a
bulk write: finding which rows moved is one pass over each transition table,
never a comparison of every row with every other, and what the refresh sorts
and hashes fits in memory. Read from the plans
PostgreSQL chose (auto_explain, as tests/ingest/test_ingest_bulk.py does),
not from a clock."""

import pytest
from django.db import connection

from sandboxes import models as m

pytestmark = pytest.mark.django_db


def leases(n: int, prefix: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO sandboxes_environmentlease (id, placeholder, created_at, updated_at, "
            "provider, provider_lease_id, status, lease_policy, acquired_at, failure_reason, "
            "metadata, superseded) SELECT gen_random_uuid(), false, now(), now(), 'daytona', "
            "%s || (i %% (%s / 2)), 'active', 'reuse_by_environment', "
            "now() - make_interval(secs => i), '', '{}', false "
            "FROM generate_series(1, %s) i",
            [prefix, n, n],
        )


def plans_of(statement: str, params=()) -> list[str]:
    plans: list[str] = []

    def note(diagnostic):
        plans.append(diagnostic.message_primary or "")

    connection.connection.add_notice_handler(note)
    try:
        with connection.cursor() as cursor:
            cursor.execute("LOAD 'auto_explain'")
            cursor.execute("SET LOCAL auto_explain.log_min_duration = 0")
            cursor.execute("SET LOCAL auto_explain.log_analyze = on")
            cursor.execute("SET LOCAL auto_explain.log_nested_statements = on")
            cursor.execute("SET LOCAL client_min_messages = log")
            cursor.execute(statement, params)
            cursor.execute("SET LOCAL client_min_messages = notice")
    finally:
        connection.connection.remove_notice_handler(note)
    return plans


def transition_plans(plans: list[str]) -> list[str]:
    return [p for p in plans if "Named Tuplestore Scan" in p]


def test_a_status_update_of_many_leases_reads_each_transition_table_once():
    leases(2000, "sbx-")
    plans = plans_of("UPDATE sandboxes_environmentlease SET status = 'released'")
    (check,) = transition_plans(plans)  # nothing moved: the check, and no refresh
    assert "Nested Loop" not in check, check
    assert "Rows Removed by Join Filter" not in check, check
    assert not [p for p in plans if "SET superseded" in p]


def test_a_move_refreshes_the_sandboxes_before_and_after():
    leases(2000, "sbx-")
    first = m.EnvironmentLease.objects.filter(provider_lease_id="sbx-1").order_by("acquired_at")
    older, newer = list(first)
    assert older.superseded and not newer.superseded
    # The newer lease moves to another sandbox: the older is no longer superseded
    # there, and the moved one is alone in its new sandbox.
    plans = plans_of(
        "UPDATE sandboxes_environmentlease SET provider_lease_id = 'sbx-moved' WHERE id = %s",
        [newer.pk],
    )
    older.refresh_from_db()
    newer.refresh_from_db()
    assert not older.superseded and not newer.superseded
    for plan in transition_plans(plans):
        assert "Rows Removed by Join Filter" not in plan, plan


def test_a_mirror_page_of_new_leases_refreshes_without_spilling_to_disk():
    # A mirror page: 5,000 leases of as many sandboxes, rows as wide as Paperclip's
    # (a failure reason, metadata with receipts). Until 0030 the lock's sort
    # carried each whole transition row beside its lease, past work_mem:
    # "Sort Method: external merge  Disk: 3872kB".
    plans = plans_of(
        "INSERT INTO sandboxes_environmentlease (id, placeholder, created_at, updated_at, "
        "provider, provider_lease_id, status, lease_policy, acquired_at, failure_reason, "
        "metadata, superseded) SELECT gen_random_uuid(), false, now(), now(), 'daytona', "
        "'sbx-' || i, 'active', 'reuse_by_environment', now() - make_interval(secs => i), "
        "repeat('r', 150), jsonb_build_object('receipts', repeat('m', 500)), false "
        "FROM generate_series(1, 5000) i"
    )
    refresh = [p for p in plans if "FOR UPDATE OF l" in p or "SET superseded" in p]
    assert len(refresh) == 2, plans
    for plan in refresh:
        assert "Disk" not in plan and "external" not in plan, plan
    assert m.EnvironmentLease.objects.filter(superseded=False).count() == 5000
