"""The chaos wave's S3 pieces (`chaos_wave --storage s3`): the door that plays the
endpoint down keeps the objects, and the invariant "every exported file is in
the bucket with its hash" finds a file that is missing or changed."""

import hashlib
import uuid

import pytest
from botocore.exceptions import EndpointConnectionError

from devtools.chaos.bucket import Bucket
from devtools.s3 import Door, client
from sandboxes import models as m
from tests import factories as f

DATA = b"exported bytes\n"
SHA = hashlib.sha256(DATA).hexdigest()
KEY = m.Attachment.storage_name(SHA)


@pytest.fixture
def bucket(moto_server):
    b = Bucket(server=moto_server, name=f"chaos-{uuid.uuid4().hex[:12]}").start()
    yield b
    b.stop(server=False)


def export_receipt(bucket_name: str, key: str = KEY) -> None:
    f.ReceiptFactory(
        kind=m.ReceiptKind.SALVAGE_EXPORT,
        payload={
            "verified": True,
            "files": [
                {
                    "path": "a.txt",
                    "sha256": SHA,
                    "size": len(DATA),
                    "storage": key,
                    "backend": "s3",
                    "bucket": bucket_name,
                    "key": key,
                }
            ],
        },
    )


def test_the_door_shuts_and_opens_and_the_objects_stay(moto_server):
    door = Door(moto_server.port).open()
    through = client(door.url)
    name = f"door-{uuid.uuid4().hex[:12]}"
    through.create_bucket(Bucket=name)
    through.put_object(Bucket=name, Key="k", Body=DATA)
    door.close()
    with pytest.raises(EndpointConnectionError):
        client(door.url).get_object(Bucket=name, Key="k")
    door.open()
    assert client(door.url).get_object(Bucket=name, Key="k")["Body"].read() == DATA
    door.close()


@pytest.mark.django_db
def test_a_file_in_the_bucket_with_its_hash_passes(bucket):
    bucket.client.put_object(Bucket=bucket.name, Key=KEY, Body=DATA)
    export_receipt(bucket.name)
    assert bucket.missing() == ([], 1)


@pytest.mark.django_db
@pytest.mark.parametrize("stored", [None, b"other bytes"])
def test_a_file_missing_or_changed_in_the_bucket_is_lost(bucket, stored):
    if stored is not None:
        bucket.client.put_object(Bucket=bucket.name, Key=KEY, Body=stored)
    export_receipt(bucket.name)
    problems, checked = bucket.missing()
    assert checked == 1
    assert [(p["key"], p["why"]) for p in problems] == [(KEY, "not in the bucket with its hash")]


@pytest.mark.django_db
def test_a_file_named_in_another_store_is_lost(bucket):
    export_receipt("some-other-bucket")
    problems, _ = bucket.missing()
    assert len(problems) == 1 and problems[0]["why"] == ("s3", "some-other-bucket")
