"""Receipts and audit rows are never changed or deleted, whatever the path."""

import pytest
from django.db import IntegrityError, connection, transaction

from sandboxes.models import AppendOnlyError, AuditEvent, Receipt
from tests.factories import AuditEventFactory, ReceiptFactory

pytestmark = pytest.mark.django_db

CASES = [
    pytest.param(ReceiptFactory, {"request_id": "changed"}, id="receipt"),
    pytest.param(AuditEventFactory, {"reason": "rewritten"}, id="audit"),
]


@pytest.mark.parametrize(("factory", "change"), CASES)
def test_model_save_refuses_an_update(factory, change):
    row = factory()
    for field, value in change.items():
        setattr(row, field, value)
    with pytest.raises(AppendOnlyError):
        row.save()


@pytest.mark.parametrize(("factory", "change"), CASES)
def test_model_delete_is_refused(factory, change):
    row = factory()
    with pytest.raises(AppendOnlyError):
        row.delete()
    assert type(row).objects.filter(pk=row.pk).exists()


@pytest.mark.parametrize(("factory", "change"), CASES)
def test_queryset_update_is_refused_by_the_database(factory, change):
    row = factory()
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        type(row).objects.filter(pk=row.pk).update(**change)


@pytest.mark.parametrize(("factory", "change"), CASES)
def test_queryset_delete_is_refused_by_the_database(factory, change):
    row = factory()
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        type(row).objects.filter(pk=row.pk).delete()
    assert type(row).objects.filter(pk=row.pk).exists()


@pytest.mark.parametrize("model", [Receipt, AuditEvent])
@pytest.mark.parametrize("sql", ["UPDATE {table} SET id = id", "DELETE FROM {table}"])
def test_raw_sql_is_refused(model, sql):
    (ReceiptFactory if model is Receipt else AuditEventFactory)()
    with (
        pytest.raises(IntegrityError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql.format(table=model._meta.db_table))
    assert model.objects.count() == 1


def test_inserting_is_allowed():
    ReceiptFactory.create_batch(3)
    AuditEventFactory.create_batch(2)
    assert (Receipt.objects.count(), AuditEvent.objects.count()) == (3, 2)
