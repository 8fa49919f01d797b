"""Everything salvaged from a sandbox as one zip: what its verified exports hold,
checked against the store, streamed with a MANIFEST.json (docs/architecture.md,
restore a salvage). The console's page, the API and `restore_salvage` read
salvaged bytes here, through the storage the attachments use, never a path on
disk.

A stored object that does not hash to its name is never served as if it did:
`problems` hashes every object before a download starts (the download is
refused, naming the file), and `stream_zip` hashes each object again as it
sends it. An object that changed in between stops the stream before the zip's
central directory, so what arrives is not a readable zip.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.core.files.storage import Storage
from django.utils import timezone

from sandboxes import content_store
from sandboxes.models import Attachment, Receipt, Retirement
from sandboxes.rules.restore import path_problem

SCHEMA = "paperclip-console.salvage.v1"
MANIFEST = "MANIFEST.json"
CHUNK = content_store.CHUNK


class SalvageCorrupt(Exception):
    """A stored object did not hash to its name while it was being sent."""


def salvage_storage() -> Storage:
    """Where salvaged bytes live: the attachments' storage (the exports write
    there, sandboxes/reconciler/salvage.py)."""
    return Attachment._meta.get_field("file").storage  # type: ignore[attr-defined]


@dataclass(frozen=True)
class SalvagedFile:
    path: str
    sha256: str
    size: int
    storage: str  # the object's name in salvage_storage()
    export: str  # the receipt id of the export that holds it
    member: str  # its name inside the zip
    stamp: datetime  # the export's confirmed_at, the member's date


@dataclass(frozen=True)
class Salvage:
    """The verified exports of a record's sandbox and every file they hold."""

    record: Retirement
    exports: list[Receipt]
    files: list[SalvagedFile]
    malformed: list[str]  # file entries of a receipt that name no object

    @property
    def empty(self) -> bool:
        return not self.exports

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


def folder_of(index: int, receipt: Receipt) -> str:
    """The zip folder of the `index`-th export (1-based, oldest first)."""
    return f"exports/{index:02d}-{receipt.pk}/"


def salvage_of(r: Retirement) -> Salvage:
    """What was salvaged from `r`'s sandbox (ReceiptQuerySet.salvage_of): one query."""
    exports = list(Receipt.objects.salvage_of(r.provider, r.provider_lease_id))
    files, malformed = [], []
    for index, receipt in enumerate(exports, start=1):
        for entry in (receipt.payload or {}).get("files") or []:
            ok = isinstance(entry, dict) and all(
                isinstance(entry.get(k), t)
                for k, t in (("path", str), ("sha256", str), ("size", int), ("storage", str))
            )
            if not ok:
                malformed.append(f"export {receipt.pk} lists a file without path, hash or object")
                continue
            files.append(
                SalvagedFile(
                    path=entry["path"],
                    sha256=entry["sha256"],
                    size=entry["size"],
                    storage=entry["storage"],
                    export=str(receipt.pk),
                    member=folder_of(index, receipt) + entry["path"],
                    stamp=receipt.confirmed_at,
                )
            )
    return Salvage(record=r, exports=exports, files=files, malformed=malformed)


def problems(salvage: Salvage, storage: Storage | None = None) -> list[str]:
    """Why the salvage cannot be served whole, each naming its file: a path that
    would leave the folder it is unpacked in, an object missing from the store,
    or one that does not hash to its name. Each object is read once."""
    storage = storage or salvage_storage()
    out = list(salvage.malformed)
    found: dict[str, tuple[str, int] | None] = {}
    for f in salvage.files:
        if why := path_problem(f.path):
            out.append(f"{f.path!r} in export {f.export} {why}")
            continue
        if f.storage not in found:
            try:
                found[f.storage] = content_store.digest_of(storage, f.storage)
            except OSError as exc:
                out.append(f"{f.path} (export {f.export}): the store could not be read: {exc}")
                continue
        digest = found[f.storage]
        if digest is None:
            out.append(f"{f.path} (export {f.export}): the stored object {f.storage} is missing")
        elif digest != (f.sha256, f.size):
            out.append(
                f"{f.path} (export {f.export}): the stored object {f.storage} does not hash to "
                f"its name (sha256 {digest[0][:12]}…, {digest[1]} bytes; the export recorded "
                f"{f.sha256[:12]}…, {f.size} bytes)"
            )
    return out


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def manifest(salvage: Salvage) -> dict:
    """MANIFEST.json: the sandbox, lease, run, task and record, every export
    receipt, every file (path, size, sha256, where it is in the zip) and the
    deleted paths."""
    r = salvage.record
    lease, run, issue = r.lease, r.lease.heartbeat_run, r.lease.issue
    return {
        "schema": SCHEMA,
        "generated_at": timezone.now().isoformat(),
        "sandbox": {"provider": r.provider, "id": r.provider_lease_id},
        "record": {"id": str(r.pk), "kind": r.kind, "stage": r.stage},
        "environment": {"id": str(r.environment_id), "name": r.environment.name},
        "lease": {"id": str(lease.pk), "status": lease.status, "policy": lease.lease_policy},
        "run": {"id": str(run.pk), "status": run.status} if run else None,
        "task": {"id": str(issue.pk), "key": issue.key, "title": issue.title} if issue else None,
        "receipts": [
            {
                "id": str(x.pk),
                "kind": x.kind,
                "confirmed_at": _iso(x.confirmed_at),
                "record_id": str(x.retirement_id) if x.retirement_id else None,
                "lease_id": str(x.lease_id),
                "run_id": str(x.run_id) if x.run_id else None,
                "compare_receipt_id": (x.payload or {}).get("compare_receipt_id"),
                "folder": folder_of(i, x),
                "files": len((x.payload or {}).get("files") or []),
                "bytes": (x.payload or {}).get("bytes"),
                "deleted": list((x.payload or {}).get("deleted") or []),
            }
            for i, x in enumerate(salvage.exports, start=1)
        ],
        "files": [
            {
                "path": f.path,
                "size": f.size,
                "sha256": f.sha256,
                "export": f.export,
                "zip_path": f.member,
            }
            for f in salvage.files
        ],
        "deleted": sorted(
            {p for x in salvage.exports for p in (x.payload or {}).get("deleted") or []}
        ),
    }


class _Pipe(io.RawIOBase):
    """A write-only, unseekable sink whose bytes are taken as they come: zipfile
    then writes each member with a data descriptor, and nothing is kept."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        self._chunks.append(bytes(b))
        return len(b)

    def take(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks.clear()
        return out


def _info(name: str, stamp: datetime, size: int) -> zipfile.ZipInfo:
    local = timezone.localtime(stamp) if timezone.is_aware(stamp) else stamp
    info = zipfile.ZipInfo(name, date_time=max(local.timetuple()[:6], (1980, 1, 1, 0, 0, 0)))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.file_size = size  # zipfile picks zip64 from it
    info.external_attr = 0o644 << 16
    return info


def stream_zip(salvage: Salvage, storage: Storage | None = None) -> Iterator[bytes]:
    """The zip, chunk by chunk: MANIFEST.json first, then each export's files in
    its folder, each hashed as it is read. Memory stays at a chunk or two."""
    storage = storage or salvage_storage()
    pipe = _Pipe()
    archive = zipfile.ZipFile(pipe, "w")  # closed below only once every file verified
    body = json.dumps(manifest(salvage), indent=2).encode()
    with archive.open(_info(MANIFEST, timezone.now(), len(body)), "w") as out:
        out.write(body)
    yield pipe.take()
    for f in salvage.files:
        sha, size = hashlib.sha256(), 0
        with (
            storage.open(f.storage, "rb") as src,
            archive.open(_info(f.member, f.stamp, f.size), "w") as out,
        ):
            while chunk := src.read(CHUNK):
                sha.update(chunk)
                size += len(chunk)
                out.write(chunk)
                if sent := pipe.take():
                    yield sent
            if (sha.hexdigest(), size) != (f.sha256, f.size):
                raise SalvageCorrupt(
                    f"{f.path} (export {f.export}): the stored object {f.storage} changed "
                    f"while it was sent and no longer hashes to its name"
                )
        yield pipe.take()
    archive.close()
    yield pipe.take()
