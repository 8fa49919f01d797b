"""Shared by the Paperclip attachment tests: a configured console pointed at the
fake Paperclip (devtools/paperclip_server.py), and a verified export built the
way steps.py:do_export leaves one (stored bytes, Attachment rows, the receipt)."""

from __future__ import annotations

import hashlib
import io
import json
import uuid
import zipfile

from django.core.files.storage import default_storage

from sandboxes import content_store
from sandboxes import models as m
from sandboxes.receipts import write_receipt
from tests import factories as f

KEY = "board-key-for-tests"


def configure(settings, monkeypatch, pc, *companies, key=KEY, kind="board"):
    settings.PAPERCLIP_API_URL = pc.url
    monkeypatch.setenv("PAPERCLIP_API_KEY", key)
    pc.add_key(key, kind, *companies)


def export_of(lease, files: dict[str, bytes], deleted=()) -> m.Receipt:
    """A verified salvage_export receipt for `lease`'s record, bytes stored."""
    r = m.Retirement.objects.filter(lease=lease).first() or f.RetirementFactory(lease=lease)
    entries = []
    for path, data in sorted(files.items()):
        sha = hashlib.sha256(data).hexdigest()
        name = m.Attachment.storage_name(sha)
        content_store.put_verified(default_storage, name, io.BytesIO(data), sha, len(data))
        a = m.Attachment.objects.create(
            issue_id=lease.issue_id, retirement=r, path=path, sha256=sha, size=len(data), file=name
        )
        entries.append(
            {
                "path": path,
                "size": len(data),
                "sha256": sha,
                "attachment": str(a.pk),
                "storage": name,
            }
        )
    return write_receipt(
        r,
        m.ReceiptKind.SALVAGE_EXPORT,
        payload={
            "verified": True,
            "compare_receipt_id": str(uuid.uuid4()),
            "files": entries,
            "deleted": list(deleted),
            "bytes": sum(e["size"] for e in entries),
        },
    )


def zips(pc, issue_id) -> list[tuple[dict, zipfile.ZipFile]]:
    """(attachment row, opened zip) of every attachment Paperclip holds for the task, by part."""
    out = []
    for row in pc.attachments_of(issue_id):
        z = zipfile.ZipFile(io.BytesIO(row["data"]))
        out.append((row, z))
    return sorted(out, key=lambda x: json.loads(x[1].read("MANIFEST.json"))["part"])


def joined(parts: list[zipfile.ZipFile]) -> dict[str, bytes]:
    """Every file of an export put back together from its parts, as MANIFEST.json says."""
    by_number = {json.loads(z.read("MANIFEST.json"))["part"]: z for z in parts}
    manifest = json.loads(by_number[1].read("MANIFEST.json"))
    files = {}
    for entry in manifest["files"]:
        data = b"".join(
            by_number[c["part"]].read(c["entry"])
            for c in sorted(entry["chunks"], key=lambda c: c["offset"])
        )
        assert hashlib.sha256(data).hexdigest() == entry["sha256"] and len(data) == entry["size"]
        files[entry["path"]] = data
    return files
