"""Audit rows and receipts stay as written on the paths
tests/models/test_append_only.py does not try: bulk_update, upserts,
saving over an existing id, UPDATE … FROM, MERGE, cascades and the admin site."""

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import ProtectedError

from sandboxes.models import AppendOnlyError, AuditEvent, Receipt
from tests.factories import AuditEventFactory, ReceiptFactory, UserFactory

pytestmark = pytest.mark.django_db

CASES = [
    pytest.param(ReceiptFactory, "request_id", id="receipt"),
    pytest.param(AuditEventFactory, "reason", id="audit"),
]


def _unchanged(row, field):
    fresh = type(row).objects.get(pk=row.pk)
    assert getattr(fresh, field) == getattr(row, field)


@pytest.mark.parametrize(("factory", "field"), CASES)
def test_bulk_update_is_refused(factory, field):
    row = factory()
    original = getattr(row, field)
    setattr(row, field, "rewritten")
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        type(row).objects.bulk_update([row], [field])
    setattr(row, field, original)
    _unchanged(row, field)


@pytest.mark.parametrize(("factory", "field"), CASES)
def test_update_or_create_on_an_existing_row_is_refused(factory, field):
    row = factory()
    with pytest.raises(AppendOnlyError), transaction.atomic():
        type(row).objects.update_or_create(pk=row.pk, defaults={field: "rewritten"})
    _unchanged(row, field)


@pytest.mark.parametrize(("factory", "field"), CASES)
def test_an_upsert_is_refused(factory, field):
    row = factory()
    copy = type(row).objects.filter(pk=row.pk).values().get()
    copy[field] = "rewritten"
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        type(row).objects.bulk_create(
            [type(row)(**copy)], update_conflicts=True, unique_fields=["id"], update_fields=[field]
        )
    _unchanged(row, field)


@pytest.mark.parametrize(("factory", "field"), CASES)
def test_saving_a_new_instance_over_an_existing_id_is_refused(factory, field):
    row = factory()
    copy = type(row).objects.filter(pk=row.pk).values().get()
    copy[field] = "rewritten"
    with pytest.raises(IntegrityError), transaction.atomic():
        type(row)(**copy).save()
    _unchanged(row, field)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE {t} SET {f} = 'x' FROM {t} AS other WHERE {t}.id = other.id",
        "DELETE FROM {t} USING {t} AS other WHERE {t}.id = other.id",
        "MERGE INTO {t} USING (SELECT id FROM {t}) AS s ON {t}.id = s.id "
        "WHEN MATCHED THEN UPDATE SET {f} = 'x'",
        "MERGE INTO {t} USING (SELECT id FROM {t}) AS s ON {t}.id = s.id WHEN MATCHED THEN DELETE",
        "WITH gone AS (DELETE FROM {t} RETURNING id) SELECT count(*) FROM gone",
    ],
    ids=["update-from", "delete-using", "merge-update", "merge-delete", "cte-delete"],
)
@pytest.mark.parametrize(("factory", "field"), CASES)
def test_raw_sql_variants_are_refused(factory, field, sql):
    row = factory()
    table = type(row)._meta.db_table
    with (
        pytest.raises(IntegrityError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql.format(t=table, f=field))
    _unchanged(row, field)


def test_deleting_the_actor_cannot_cascade_into_the_trail():
    user = UserFactory()
    event = AuditEventFactory(actor=user, actor_label=user.username)
    with pytest.raises(ProtectedError), transaction.atomic():
        user.delete()
    assert AuditEvent.objects.filter(pk=event.pk, actor=user).exists()


def test_deleting_a_lease_cannot_cascade_into_its_receipts():
    receipt = ReceiptFactory()
    with pytest.raises(ProtectedError), transaction.atomic():
        receipt.lease.delete()
    assert Receipt.objects.filter(pk=receipt.pk).exists()


@pytest.mark.parametrize(("factory", "field"), CASES)
def test_the_admin_site_cannot_change_or_delete_them_even_for_a_superuser(
    admin_client, factory, field
):
    row = factory()
    base = f"/admin/sandboxes/{row._meta.model_name}/{row.pk}"
    assert admin_client.post(f"{base}/delete/", {"post": "yes"}).status_code == 403
    admin_client.post(f"{base}/change/", {field: "rewritten"})
    response = admin_client.post(
        f"/admin/sandboxes/{row._meta.model_name}/",
        {"action": "delete_selected", "_selected_action": [str(row.pk)], "post": "yes"},
    )
    assert response.status_code in (200, 302, 403)
    _unchanged(row, field)
    assert type(row).objects.filter(pk=row.pk).exists()
