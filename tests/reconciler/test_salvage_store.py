"""A failed write never poisons the content-addressed store (issue 22 item 3).

An export that fails mid-write (a full disk, a quota, EFBIG) used to leave a
partial file at the content-addressed name; the next attempt saw the name,
skipped the write and failed "stored bytes do not verify" for ever, for every
sandbox holding that content. The bytes are now written to a temporary name
beside it, verified, then renamed; a stored object that does not verify is
replaced, never trusted (docs/rules.md, proof).

The disk that fills up is real: RLIMIT_FSIZE makes the kernel refuse, with
EFBIG, any write that would grow a file of this process past the limit.
"""

import errno
import hashlib
import os
import resource
import signal
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.storage import default_storage
from django.utils import timezone

from sandboxes import models as m
from sandboxes.reconciler.listing import sync_retirements

from .conftest import SAVED, retirement_of

pytestmark = pytest.mark.django_db

LIMIT = 32 * 1024
BIG = bytes(range(256)) * 1024  # 256 KiB, far past the limit
BIG_SHA = hashlib.sha256(BIG).hexdigest()
ON_SANDBOX = {**SAVED, "notes/big.bin": BIG}


@contextmanager
def disk_refuses_past(limit: int):
    """Writes that would grow a file past `limit` bytes fail with EFBIG, as a full
    disk refuses the rest of a write it began."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def final_path(media: Path, sha: str = BIG_SHA) -> Path:
    return media / m.Attachment.storage_name(sha)


def leftovers(media: Path) -> list[str]:
    return sorted(p.name for p in media.rglob("*") if p.is_file())


def dirty(warm, files=ON_SANDBOX, **kw):
    kw.setdefault("status", m.LeaseStatus.FAILED)
    return warm(files=files, **kw)


def due(r):
    m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())


def test_a_write_cut_by_a_full_disk_leaves_nothing_and_the_retry_succeeds(
    warm, local, reconcile, media
):
    lease = dirty(warm)
    sync_retirements()
    before = timezone.now()
    with disk_refuses_past(LIMIT):
        reconcile()
    # Nothing at the content-addressed name, no temporary left behind, no receipt.
    assert not final_path(media).exists()
    assert leftovers(media) == []
    r = retirement_of(lease)
    assert r.stage == m.Stage.FAILED and r.attempts == 1
    # In words: which file, and what the disk said.
    assert "notes/big.bin" in r.last_error
    assert os.strerror(errno.EFBIG) in r.last_error
    assert r.next_attempt_at >= before + timedelta(seconds=30)
    assert not r.receipts.filter(kind=m.ReceiptKind.SALVAGE_EXPORT).exists()
    assert local.count("destroy") == 0
    assert local.inner.get(lease.provider_lease_id).state == "stopped"

    due(r)
    reconcile()  # the disk has room again
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED, r.last_error
    assert final_path(media).read_bytes() == BIG
    export = r.receipts.get(kind=m.ReceiptKind.SALVAGE_EXPORT)
    assert export.payload["verified"] is True
    assert leftovers(media) == [BIG_SHA]


def test_a_corrupt_object_at_the_content_address_is_replaced_not_trusted(
    warm, local, reconcile, media
):
    # What a failed write left behind before the fix: the first 32 KiB.
    poisoned = final_path(media)
    poisoned.parent.mkdir(parents=True)
    poisoned.write_bytes(BIG[:LIMIT])
    lease = dirty(warm)
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED, r.last_error
    assert poisoned.read_bytes() == BIG
    (export,) = r.receipts.filter(kind=m.ReceiptKind.SALVAGE_EXPORT)
    [big] = [x for x in export.payload["files"] if x["path"] == "notes/big.bin"]
    assert big["sha256"] == BIG_SHA and big["size"] == len(BIG)
    with default_storage.open(m.Attachment.objects.get(pk=big["attachment"]).file.name) as fh:
        assert fh.read() == BIG


def test_every_sandbox_holding_the_content_succeeds_after_a_cut_write(
    warm, local, reconcile, media
):
    first, second = dirty(warm), dirty(warm)
    sync_retirements()
    with disk_refuses_past(LIMIT):
        reconcile()
    for lease in (first, second):
        r = retirement_of(lease)
        assert r.stage == m.Stage.FAILED and "notes/big.bin" in r.last_error
        due(r)
    assert not final_path(media).exists()
    reconcile()
    for lease in (first, second):
        r = retirement_of(lease)
        assert r.stage == m.Stage.RETIRED, r.last_error
    assert local.count("destroy") == 2
    names = set(m.Attachment.objects.filter(sha256=BIG_SHA).values_list("file", flat=True))
    assert names == {m.Attachment.storage_name(BIG_SHA)}
    assert final_path(media).read_bytes() == BIG
