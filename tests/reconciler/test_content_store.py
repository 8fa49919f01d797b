"""The content-addressed store (sandboxes/content_store.py): a name holds
exactly the bytes its sha256 names, or nothing (docs/rules.md, proof)."""

import hashlib
import threading
from io import BytesIO

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import InMemoryStorage, default_storage

from sandboxes import content_store
from sandboxes import models as m

BIG = bytes(range(256)) * 1024
BIG_SHA = hashlib.sha256(BIG).hexdigest()
NAME = m.Attachment.storage_name(BIG_SHA)


def stored(media):
    return media / NAME


def files_under(media) -> list[str]:
    return sorted(p.name for p in media.rglob("*") if p.is_file())


def put(data: bytes = BIG, sha: str = BIG_SHA, size: int = len(BIG)) -> None:
    content_store.put_verified(default_storage, NAME, BytesIO(data), sha, size)


def test_concurrent_writers_of_the_same_content_all_verify(media):
    errors = []

    def writer():
        try:
            put()
        except Exception as exc:  # collected: every writer must succeed
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert stored(media).read_bytes() == BIG
    assert files_under(media) == [BIG_SHA]


def test_an_object_that_verifies_is_kept_as_it_is(media):
    put()
    inode = stored(media).stat().st_ino
    put()
    assert stored(media).stat().st_ino == inode


def test_bytes_that_do_not_match_their_name_are_refused_and_nothing_is_kept(media):
    with pytest.raises(content_store.StoreError, match="do not verify"):
        put(BIG[:-1])
    assert not stored(media).exists()
    assert files_under(media) == []


def test_a_corrupt_object_is_replaced_and_the_replacement_verified(media):
    stored(media).parent.mkdir(parents=True)
    stored(media).write_bytes(BIG[:100])
    put()
    assert stored(media).read_bytes() == BIG
    assert files_under(media) == [BIG_SHA]


def test_a_storage_without_local_paths_replaces_a_corrupt_object_too():
    # What a remote backend (no .path()) gets: delete what does not verify,
    # save, verify by reading back. Such a backend's save must be atomic.
    storage = InMemoryStorage()
    storage.save(NAME, ContentFile(BIG[:100]))
    content_store.put_verified(storage, NAME, BytesIO(BIG), BIG_SHA, len(BIG))
    with storage.open(NAME) as fh:
        assert fh.read() == BIG
    assert content_store.digest_of(storage, NAME) == (BIG_SHA, len(BIG))
    assert content_store.digest_of(storage, "attachments/none") is None


def test_a_backend_may_bring_its_own_verified_write():
    class Backend(InMemoryStorage):
        puts: list = []

        def put_verified(self, name, content, sha256, size):
            self.puts.append(name)
            self.save(name, ContentFile(content.read()))

    storage = Backend()
    content_store.put_verified(storage, NAME, BytesIO(BIG), BIG_SHA, len(BIG))
    assert storage.puts == [NAME]
    # Its answer is still read back: a backend that stored other bytes is caught.
    storage.delete(NAME)
    with pytest.raises(content_store.StoreError, match="do not verify"):
        content_store.put_verified(storage, NAME, BytesIO(BIG[:-1]), BIG_SHA, len(BIG))
