"""One export as zip parts under Paperclip's ceiling (docs/rules.md, salvage on
the task). Every part is a zip of its own holding MANIFEST.json (the whole
export: every file's path, size and sha256 and where its bytes are, the deleted
paths, the sandbox, lease, run and record) and some of the files under
`files/`. A file larger than a part is stored in chunks,
`files/<path>.chunk-0001`, `…-0002`, possibly in several parts; the manifest
lists each chunk's part, entry, offset and size, and the file is its chunks
joined in offset order (its sha256 checks the join).

Entries are stored (not deflated) with a fixed date, so the same export makes
the same bytes on every attempt and a part already attached is recognised by
its sha256. The bytes are read through the Django storage the attachments use
(a filesystem or an object store alike) and checked against the export's
hashes before anything is sent."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.core.files.storage import Storage

from sandboxes import content_store
from sandboxes.models import Attachment, Receipt

SCHEMA = "paperclip-console.salvage-archive.v1"
MANIFEST = "MANIFEST.json"
DATE = (1980, 1, 1, 0, 0, 0)
# A stored entry costs its local header (30) and central record (46) plus its
# name twice; the end record is 22. The slack covers zip64 extras never needed.
ENTRY_OVERHEAD = 30 + 46 + 32
END_OVERHEAD = 22 + 128
JOIN = (
    "Each part is a zip of its own. A file is the entry files/<path>, or its "
    "chunks files/<path>.chunk-NNNN joined in offset order; its sha256 checks it."
)


class ArchiveError(Exception):
    """The export cannot be packed: the stored copy does not verify, or the ceiling is too small."""


@dataclass
class Piece:
    path: str
    entry: str
    storage_name: str
    offset: int
    size: int


@dataclass
class Layout:
    parts: list[list[Piece]] = field(default_factory=lambda: [[]])


@dataclass(frozen=True)
class Part:
    number: int
    count: int
    name: str
    data: bytes
    sha256: str

    @property
    def size(self) -> int:
        return len(self.data)


def storage() -> Storage:
    """The storage the console's attachments live in (whatever backend it is)."""
    return Attachment._meta.get_field("file").storage


def _cost(entry: str) -> int:
    return ENTRY_OVERHEAD + 2 * len(entry.encode())


def plan(files: list[dict], budget: int) -> Layout:
    """Place every file (path, size, storage) into parts of at most `budget` bytes."""
    layout = Layout()
    room = budget

    def new_part() -> None:
        nonlocal room
        layout.parts.append([])
        room = budget

    for f in sorted(files, key=lambda x: x["path"]):
        whole = f"files/{f['path']}"
        if _cost(whole) + f["size"] <= budget:
            if _cost(whole) + f["size"] > room:
                new_part()
            layout.parts[-1].append(Piece(f["path"], whole, f["storage"], 0, f["size"]))
            room -= _cost(whole) + f["size"]
            continue
        offset, n = 0, 0
        while offset < f["size"]:
            n += 1
            entry = f"{whole}.chunk-{n:04d}"
            if room - _cost(entry) < 1:
                new_part()
            if budget - _cost(entry) < 1:
                raise ArchiveError(f"a part cannot hold even one byte of {f['path']}")
            take = min(f["size"] - offset, room - _cost(entry))
            layout.parts[-1].append(Piece(f["path"], entry, f["storage"], offset, take))
            room -= _cost(entry) + take
            offset += take
    return layout


def manifest(export: Receipt, layout: Layout, number: int, company_id: str | None) -> bytes:
    r = export.retirement
    chunks: dict[str, list[dict]] = {}
    for i, pieces in enumerate(layout.parts, start=1):
        for p in pieces:
            chunks.setdefault(p.path, []).append(
                {"part": i, "entry": p.entry, "offset": p.offset, "size": p.size}
            )
    files = [
        {"path": f["path"], "size": f["size"], "sha256": f["sha256"], "chunks": chunks[f["path"]]}
        for f in sorted(export.payload.get("files", []), key=lambda x: x["path"])
    ]
    body = {
        "schema": SCHEMA,
        "part": number,
        "parts": len(layout.parts),
        "join": JOIN,
        "sandbox": {"provider": r.provider if r else "", "id": export.provider_lease_id},
        "lease_id": str(export.lease_id),
        "run_id": str(export.run_id) if export.run_id else None,
        "record_id": str(export.retirement_id) if export.retirement_id else None,
        "issue_id": str(export.lease.issue_id) if export.lease.issue_id else None,
        "company_id": company_id,
        "export_receipt_id": str(export.pk),
        "compare_receipt_id": export.payload.get("compare_receipt_id"),
        "exported_at": export.confirmed_at.isoformat(),
        "files": files,
        "deleted": sorted(export.payload.get("deleted", [])),
    }
    return json.dumps(body, indent=2, sort_keys=True).encode()


def layout_for(export: Receipt, ceiling: int, company_id: str | None) -> Layout:
    """The parts of `export` under `ceiling`, room made for each part's manifest."""
    files = export.payload.get("files", [])
    reserve = 4096
    for _ in range(8):
        budget = ceiling - END_OVERHEAD - _cost(MANIFEST) - reserve
        if budget < 1024:
            raise ArchiveError(
                f"PAPERCLIP_ATTACHMENT_MAX_BYTES ({ceiling}) leaves no room beside the "
                f"manifest of {len(files)} file(s); raise it"
            )
        layout = plan(files, budget)
        need = max(
            len(manifest(export, layout, n, company_id)) for n in range(1, len(layout.parts) + 1)
        )
        if need <= reserve:
            return layout
        reserve = need + 1024
    raise ArchiveError("the parts' layout did not settle")  # pragma: no cover


def verify_stored(export: Receipt, store: Storage) -> None:
    """Every file of the export is in the console's storage as the export hashed it."""
    for f in export.payload.get("files", []):
        got = content_store.digest_of(store, f["storage"])
        if got != (f["sha256"], f["size"]):
            raise ArchiveError(
                f"the console's stored copy of {f['path']} does not verify "
                f"({'missing' if got is None else f'sha256 {got[0][:12]}…, {got[1]} bytes'}); "
                "nothing was sent"
            )


def _read(store: Storage, piece: Piece) -> bytes:
    with store.open(piece.storage_name, "rb") as handle:
        handle.seek(piece.offset)
        data = handle.read(piece.size)
    if len(data) != piece.size:
        raise ArchiveError(f"{piece.path} is shorter in storage than the export says")
    return data


def parts(export: Receipt, ceiling: int, company_id: str | None) -> Iterator[Part]:
    """The export's parts, one at a time (each at most `ceiling` bytes)."""
    store = storage()
    verify_stored(export, store)
    layout = layout_for(export, ceiling, company_id)
    count = len(layout.parts)
    sandbox = re.sub(r"[^A-Za-z0-9._-]", "_", export.provider_lease_id)[:80]
    stem = f"salvage-{sandbox}-{str(export.pk)[:8]}"
    for number, pieces in enumerate(layout.parts, start=1):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr(
                zipfile.ZipInfo(MANIFEST, DATE), manifest(export, layout, number, company_id)
            )
            for piece in pieces:
                zf.writestr(zipfile.ZipInfo(piece.entry, DATE), _read(store, piece))
        data = buf.getvalue()
        if len(data) > ceiling:  # pragma: no cover - the layout's own bound
            raise ArchiveError(f"part {number} is {len(data)} bytes, over {ceiling}")
        name = f"{stem}.zip" if count == 1 else f"{stem}-part-{number:02d}-of-{count:02d}.zip"
        yield Part(number, count, name, data, hashlib.sha256(data).hexdigest())
