"""Salvaged files in an S3-compatible bucket (AWS S3, MinIO, R2, Ceph), through
django-storages, selected by `ATTACHMENTS_STORAGE=s3` (README: object storage).

The store is content-addressed (sandboxes/content_store.py): a key holds the bytes
its sha256 names, so a key is never renamed to make room and never written twice.
`put_verified` is the one write: a conditional PUT (`If-None-Match: *`, or
`If-Match` on the ETag of an object that did not verify) carrying the body's
SHA-256, so two workers exporting the same content leave one object, nothing is
ever deleted, and the bucket itself refuses a body damaged on the way. The caller then reads
the object back from the bucket (every `open` is a fresh GET into a new
temporary file: django-storages keeps no cache between opens) and checks its
sha256 and size before anything counts as proof.

A bucket that cannot be reached, or answers with an error, is an OSError that
names the endpoint: the export fails, writes no receipt, and is retried.
"""

from __future__ import annotations

import base64
from typing import IO, Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from django.core.files.storage import FileSystemStorage, Storage
from storages.backends.s3 import S3Storage
from storages.utils import clean_name

# One unreachable bucket costs a step seconds, not minutes: botocore's own
# defaults are a 60 s connect timeout and retries on top.
CONNECT_SECONDS = 5
READ_SECONDS = 60
ATTEMPTS = 3


class ObjectStoreError(OSError):
    """The bucket could not be reached, or refused the request."""


def _words(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return f"{error.get('Code', 'error')} (HTTP {status}): {error.get('Message', '')}".strip()
    return str(exc)


def _status(exc: ClientError) -> int | None:
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")


class SalvageS3Storage(S3Storage):
    """S3Storage for content-addressed salvage: names are kept as given (never a
    `_abc123` copy), the write is conditional and checksummed, failures are
    ObjectStoreErrors that say which bucket at which endpoint."""

    def get_default_settings(self) -> dict[str, Any]:
        defaults = super().get_default_settings()
        defaults["file_overwrite"] = True
        if defaults.get("client_config") is None:
            defaults["client_config"] = Config(
                connect_timeout=CONNECT_SECONDS,
                read_timeout=READ_SECONDS,
                retries={"max_attempts": ATTEMPTS, "mode": "standard"},
                s3={"addressing_style": defaults.get("addressing_style")},
                signature_version=defaults.get("signature_version"),
                proxies=defaults.get("proxies"),
            )
        return defaults

    @property
    def where(self) -> str:
        return f"bucket {self.bucket_name!r} at {self.endpoint_url or 'the AWS default endpoint'}"

    def key_of(self, name: str) -> str:
        """The object key `name` is stored under (AWS_LOCATION prefix included)."""
        return self._normalize_name(clean_name(name))

    def get_available_name(self, name: str, max_length: int | None = None) -> str:
        # A content-addressed name is its content: the same name, never a copy.
        return clean_name(name)

    def _open(self, name, mode="rb"):
        try:
            handle = super()._open(name, mode)
            handle.file  # noqa: B018 -- the GET happens here, inside the translation
        except FileNotFoundError:
            raise
        except (BotoCoreError, ClientError) as exc:
            raise ObjectStoreError(
                f"could not read {name} from {self.where}: {_words(exc)}"
            ) from exc
        return handle

    def put_verified(self, name: str, content: IO[bytes], sha256: str, size: int) -> None:
        """Store `content` at `name`: created if absent, or replacing the object
        content_store found there not verifying, only if it is still that object
        (If-Match on its ETag). Nothing is ever deleted: an object a concurrent
        writer stored whole is at worst overwritten with the same bytes. A 412
        means another writer got there first; the caller re-reads and verifies."""
        key = self.key_of(name)
        client = self.connection.meta.client
        try:
            try:
                condition = {
                    "IfMatch": client.head_object(Bucket=self.bucket_name, Key=key)["ETag"]
                }
            except ClientError as exc:
                if _status(exc) != 404:
                    raise
                condition = {"IfNoneMatch": "*"}
            content.seek(0)
            client.put_object(
                Bucket=self.bucket_name,
                Key=key,
                Body=content,
                ContentLength=size,
                ContentType="application/octet-stream",
                ChecksumSHA256=base64.b64encode(bytes.fromhex(sha256)).decode(),
                **condition,
                **self._extra_put_args(key),
            )
        except ClientError as exc:
            if _status(exc) == 412:
                return
            raise ObjectStoreError(
                f"could not store {name} in {self.where}: {_words(exc)}"
            ) from exc
        except BotoCoreError as exc:
            raise ObjectStoreError(
                f"could not store {name} in {self.where}: {_words(exc)}"
            ) from exc

    def _extra_put_args(self, key: str) -> dict[str, Any]:
        """The object parameters configured for the bucket (AWS_S3_OBJECT_PARAMETERS,
        AWS_DEFAULT_ACL), as S3Storage's own writes send them."""
        params = dict(self.get_object_parameters(key))
        if self.default_acl and "ACL" not in params:
            params["ACL"] = self.default_acl
        params.pop("ContentType", None)
        return params


def describe(storage: Storage, name: str = "") -> dict[str, str | None]:
    """Where salvaged bytes live, for a receipt: the backend, the bucket and the key
    (on a filesystem: no bucket, the path under MEDIA_ROOT)."""
    if isinstance(storage, S3Storage):
        return {
            "backend": "s3",
            "endpoint": storage.endpoint_url or None,
            "bucket": storage.bucket_name,
            "key": storage._normalize_name(clean_name(name)) if name else None,
        }
    backend = "filesystem" if isinstance(storage, FileSystemStorage) else type(storage).__name__
    return {"backend": backend, "endpoint": None, "bucket": None, "key": name or None}
