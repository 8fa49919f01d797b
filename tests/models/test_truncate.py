"""TRUNCATE on receipts and audit rows is refused by the database (issue 10 item
10): it fires no row trigger, so migration 0002's guard never saw it.

Fails on main: TRUNCATE emptied both tables.
"""

import pytest
from django.db import DatabaseError, connection, transaction

from sandboxes import models as m
from tests import factories as f


@pytest.mark.django_db
@pytest.mark.parametrize("table", ["sandboxes_receipt", "sandboxes_auditevent"])
def test_truncate_is_refused(table):
    f.ReceiptFactory()
    f.AuditEventFactory()
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # settle the inserts above
        cursor.execute(f"TRUNCATE {table} CASCADE")
    assert m.Receipt.objects.count() == 1
    assert m.AuditEvent.objects.count() == 1


@pytest.mark.django_db
def test_truncating_a_table_that_cascades_into_receipts_is_refused():
    f.ReceiptFactory()
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("TRUNCATE sandboxes_environmentlease CASCADE")
    assert m.Receipt.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_test_reset_path_still_empties_them():
    """The flush after this transactional test truncates both tables through the
    documented test-only path (tests/conftest.py); the next test starts empty."""
    f.ReceiptFactory()
    f.AuditEventFactory()
    assert m.Receipt.objects.count() == 1


@pytest.mark.django_db
def test_the_reset_left_nothing_behind():
    assert m.Receipt.objects.count() == 0
    assert m.AuditEvent.objects.count() == 0
