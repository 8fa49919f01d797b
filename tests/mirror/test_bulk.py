"""What `bulk.upsert` answers (sandboxes/mirror/bulk.py): how many records it
wrote, and the keys of the ones it left alone, which the mirror's writer
drops from what it goes on to write (receipts, intents, exports)."""

import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from sandboxes import models as m
from sandboxes.mirror import bulk
from sandboxes.mirror.bulk import Upserted
from tests.factories import EnvironmentLeaseFactory

pytestmark = pytest.mark.django_db


def issues(ids, at, title):
    return [{"id": pk, "source_updated_at": at, "title": title} for pk in ids]


def test_an_upsert_names_the_records_a_newer_row_kept_out():
    now = timezone.now()
    ids = sorted(uuid.uuid4() for _ in range(4))
    with transaction.atomic():
        first = bulk.upsert(m.Issue, issues(ids, now, "first"), update=["title"], newer_only=True)
    assert first == Upserted(written=4, skipped=[])
    newer = ids[1], ids[3]
    m.Issue.objects.filter(pk__in=newer).update(source_updated_at=now + timedelta(hours=1))
    with transaction.atomic():
        again = bulk.upsert(m.Issue, issues(ids, now, "again"), update=["title"], newer_only=True)
    assert again.written == 2
    assert sorted(again.skipped) == sorted(newer)
    titles = dict(m.Issue.objects.filter(pk__in=ids).values_list("pk", "title"))
    assert titles == {ids[0]: "again", ids[1]: "first", ids[2]: "again", ids[3]: "first"}


def test_an_insert_or_nothing_names_the_keys_already_there():
    """A key of several columns comes back as a tuple of its values."""
    lease = EnvironmentLeaseFactory()
    now = timezone.now()

    def receipt(request_id):
        return {
            "id": uuid.uuid4(),
            "kind": m.ReceiptKind.TERMINATION,
            "lease_id": lease.pk,
            "provider_lease_id": lease.provider_lease_id,
            "confirmed_at": now,
            "request_id": request_id,
        }

    conflict = ("lease_id", "kind", "request_id")
    with transaction.atomic():
        first = bulk.upsert(m.Receipt, [receipt("a")], update=None, conflict=conflict)
    assert first == Upserted(1, [])
    with transaction.atomic():
        again = bulk.upsert(m.Receipt, [receipt("a"), receipt("b")], update=None, conflict=conflict)
    assert again == Upserted(1, [(lease.pk, m.ReceiptKind.TERMINATION, "a")])
    assert m.Receipt.objects.filter(lease=lease).count() == 2


def test_a_key_that_may_be_null_is_refused():
    """NULLs never conflict nor compare equal: the records left alone could not
    be told from the ones written."""
    with transaction.atomic(), pytest.raises(ValueError, match="NOT NULL"):
        bulk.upsert(m.HeartbeatRun, [{"id": uuid.uuid4()}], update=None, conflict=("issue_id",))


def test_of_records_with_one_key_the_last_is_written():
    pk = uuid.uuid4()
    now = timezone.now()
    with transaction.atomic():
        done = bulk.upsert(
            m.Issue, [*issues([pk], now, "first"), *issues([pk], now, "last")], update=["title"]
        )
    assert done == Upserted(1, [])
    assert m.Issue.objects.get(pk=pk).title == "last"
