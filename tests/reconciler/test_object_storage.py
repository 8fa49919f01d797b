"""Salvaged files in an S3 bucket, against a real S3 HTTP endpoint on loopback
(moto's server, tests/conftest.py `s3`): the export is read back from the bucket
and verified before its receipt (docs/rules.md, proof); a bucket that is down
fails the step, destroys nothing and is retried; what reads back wrong is
refused; the same content is stored once."""

import hashlib
import threading
from datetime import timedelta

import pytest
from django.core.files.storage import default_storage
from django.utils import timezone

from sandboxes import models as m
from sandboxes.object_storage import SalvageS3Storage
from sandboxes.reconciler import salvage
from sandboxes.reconciler.listing import sync_retirements

from .conftest import SAVED, retirement_of

pytestmark = pytest.mark.django_db

NEW = b"unsaved notes, only in the sandbox\n"
CHANGED = b"print('changed, never saved')\n"
ON_SANDBOX = {**SAVED, "notes/new.md": NEW, "src/app.py": CHANGED}
UNSAVED = {"notes/new.md": NEW, "src/app.py": CHANGED}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key_of(data: bytes) -> str:
    return m.Attachment.storage_name(sha(data))


def dirty(warm, files=ON_SANDBOX):
    return warm(files=files, status=m.LeaseStatus.FAILED)


def due(r):
    m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())


def exports(r):
    return list(r.receipts.filter(kind=m.ReceiptKind.SALVAGE_EXPORT))


def in_bucket(s3, key: str) -> bytes:
    return s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()


def test_a_pass_exports_to_the_bucket_reads_it_back_and_the_receipt_names_where(
    warm, local, reconcile, s3
):
    lease = dirty(warm)
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED, r.last_error
    assert local.count("destroy") == 1
    # Only the unsaved contents are in the bucket, each once, under its own hash.
    assert s3.keys() == sorted(key_of(b) for b in UNSAVED.values())
    for data in UNSAVED.values():
        assert in_bucket(s3, key_of(data)) == data
    (export,) = exports(r)
    assert export.payload["verified"] is True
    assert export.payload["store"] == {
        "backend": "s3",
        "endpoint": s3.door.url,
        "bucket": s3.bucket,
    }
    by_path = {f["path"]: f for f in export.payload["files"]}
    assert set(by_path) == set(UNSAVED)
    for path, data in UNSAVED.items():
        entry = by_path[path]
        assert (entry["backend"], entry["bucket"], entry["key"]) == ("s3", s3.bucket, key_of(data))
        assert (entry["sha256"], entry["size"]) == (sha(data), len(data))
        # The attachment on the task reads the same object back.
        with m.Attachment.objects.get(pk=entry["attachment"]).file.open("rb") as fh:
            assert fh.read() == data


def test_the_bucket_down_during_an_export_fails_the_step_and_the_retry_retires(
    warm, local, reconcile, s3
):
    lease = dirty(warm)
    sync_retirements()
    s3.door.close()
    before = timezone.now()
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.FAILED and r.attempts == 1
    # In words: which file, which bucket at which endpoint.
    assert "could not" in r.last_error and "nothing was kept" in r.last_error
    assert s3.bucket in r.last_error and s3.door.url in r.last_error
    assert r.next_attempt_at >= before + timedelta(seconds=30)
    assert exports(r) == []
    assert local.count("destroy") == 0
    assert local.inner.get(lease.provider_lease_id).state == "stopped"
    assert s3.keys() == []

    s3.door.open()
    due(r)
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED, r.last_error
    assert local.count("destroy") == 1
    assert s3.keys() == sorted(key_of(b) for b in UNSAVED.values())
    (export,) = exports(r)
    assert export.payload["verified"] is True


def test_the_bucket_going_down_after_the_first_file_leaves_no_receipt(
    warm, local, reconcile, s3, monkeypatch
):
    stored = []
    honest = SalvageS3Storage.put_verified

    def then_down(self, name, content, sha256, size):
        honest(self, name, content, sha256, size)
        stored.append(name)
        s3.door.close()  # the endpoint dies between the first file and the second

    monkeypatch.setattr(SalvageS3Storage, "put_verified", then_down)
    lease = dirty(warm)
    reconcile()
    r = retirement_of(lease)
    assert len(stored) == 1
    assert r.stage == m.Stage.FAILED, r.last_error
    assert s3.door.url in r.last_error
    assert exports(r) == [] and local.count("destroy") == 0

    monkeypatch.setattr(SalvageS3Storage, "put_verified", honest)
    s3.door.open()
    due(r)
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED, r.last_error
    assert s3.keys() == sorted(key_of(b) for b in UNSAVED.values())


class ReplacedBehindItsBack(SalvageS3Storage):
    """Stores honestly, then something else overwrites the object in the bucket
    before the read-back (a bucket that lies, a second writer, tampering)."""

    def put_verified(self, name, content, sha256, size):
        super().put_verified(name, content, sha256, size)
        self.connection.meta.client.put_object(
            Bucket=self.bucket_name, Key=self.key_of(name), Body=b"not what was exported"
        )


def test_an_object_that_reads_back_wrong_is_refused(warm, local, reconcile, s3, settings):
    default = settings.STORAGES["default"]
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {**default, "BACKEND": f"{__name__}.ReplacedBehindItsBack"},
    }
    lease = dirty(warm)
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.FAILED
    assert "do not verify" in r.last_error
    assert exports(r) == [] and local.count("destroy") == 0

    # The honest storage replaces what does not verify, and the retry retires.
    settings.STORAGES = {**settings.STORAGES, "default": default}
    due(r)
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED, r.last_error
    for data in UNSAVED.values():
        assert in_bucket(s3, key_of(data)) == data


def test_a_wrong_object_already_at_the_key_is_replaced_not_trusted(warm, local, reconcile, s3):
    s3.client.put_object(Bucket=s3.bucket, Key=key_of(NEW), Body=NEW[:5])
    lease = dirty(warm)
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED, r.last_error
    assert in_bucket(s3, key_of(NEW)) == NEW
    assert s3.keys() == sorted(key_of(b) for b in UNSAVED.values())


class MeetAtThePut(SalvageS3Storage):
    """Both workers have found the key empty before either writes."""

    barrier = threading.Barrier(2, timeout=10)

    def put_verified(self, name, content, sha256, size):
        self.barrier.wait()
        super().put_verified(name, content, sha256, size)


def test_two_workers_exporting_the_same_content_store_it_once(s3, settings):
    s3.client.put_bucket_versioning(Bucket=s3.bucket, VersioningConfiguration={"Status": "Enabled"})
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {**settings.STORAGES["default"], "BACKEND": f"{__name__}.MeetAtThePut"},
    }
    MeetAtThePut.barrier.reset()
    data = bytes(range(256)) * 512
    results, errors = [], []

    def export():
        try:
            results.append(salvage.store_verified(sha(data), iter([data]), shown="w/x.bin"))
        except Exception as exc:  # surfaced below
            errors.append(exc)

    workers = [threading.Thread(target=export) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert errors == []
    assert results == [(key_of(data), len(data))] * 2
    versions = s3.client.list_object_versions(Bucket=s3.bucket).get("Versions", [])
    assert [(v["Key"], v["Size"]) for v in versions] == [(key_of(data), len(data))]
    assert s3.keys() == [key_of(data)]


def test_two_sandboxes_with_the_same_content_share_one_object(warm, local, reconcile, s3):
    first, second = dirty(warm), dirty(warm)
    reconcile()
    for lease in (first, second):
        assert retirement_of(lease).stage == m.Stage.RETIRED
    assert s3.keys() == sorted(key_of(b) for b in UNSAVED.values())


def test_saving_a_name_twice_keeps_the_name(s3):
    from django.core.files.base import ContentFile

    name = key_of(NEW)
    assert default_storage.save(name, ContentFile(NEW)) == name
    assert default_storage.save(name, ContentFile(NEW)) == name
    assert s3.keys() == [name]


def test_every_open_reads_the_bucket_again(s3):
    name = key_of(NEW)
    s3.client.put_object(Bucket=s3.bucket, Key=name, Body=NEW)
    with default_storage.open(name) as fh:
        assert fh.read() == NEW
    s3.client.put_object(Bucket=s3.bucket, Key=name, Body=b"changed behind its back")
    with default_storage.open(name) as fh:
        assert fh.read() == b"changed behind its back"
