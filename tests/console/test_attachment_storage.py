"""A salvaged file downloaded from the console when it lives in an S3 bucket
(tests/conftest.py `s3`): read from the bucket; a bucket that is down answers
503 in words, never a 500."""

import hashlib

import pytest

from tests import factories as f

pytestmark = pytest.mark.django_db

DATA = b"salvaged, in the bucket\n"


@pytest.fixture
def attachment(s3):
    sha = hashlib.sha256(DATA).hexdigest()
    att = f.AttachmentFactory(path="notes/saved.md", sha256=sha, size=len(DATA))
    s3.client.put_object(Bucket=s3.bucket, Key=att.file.name, Body=DATA)
    return att


def test_a_file_in_the_bucket_is_downloaded(as_reviewer, attachment):
    response = as_reviewer.get(f"/attachments/{attachment.pk}/")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == DATA
    assert "saved.md" in response["Content-Disposition"]


def test_a_bucket_that_is_down_answers_503_in_words(as_reviewer, attachment, s3):
    s3.door.close()
    response = as_reviewer.get(f"/attachments/{attachment.pk}/")
    assert response.status_code == 503
    assert s3.bucket in response.content.decode() and "Try again later" in response.content.decode()


def test_a_file_missing_from_the_bucket_is_a_404(as_reviewer, attachment, s3):
    s3.client.delete_object(Bucket=s3.bucket, Key=attachment.file.name)
    assert as_reviewer.get(f"/attachments/{attachment.pk}/").status_code == 404
