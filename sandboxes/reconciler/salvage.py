"""Salvage: diff a sandbox against the last durable save, and export unsaved
files to the task as content-addressed attachments, verified by re-reading
the stored bytes (docs/rules.md, proof)."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.core.files.storage import default_storage

from sandboxes import content_store, object_storage
from sandboxes.models import Attachment
from sandboxes.providers.base import FileDigest

SPOOL_BYTES = 8 * 1024 * 1024


class ExportError(Exception):
    """An export could not be stored or verified; nothing counts as proof."""


class StaleCompare(ExportError):
    """A file's download does not match what the compare listed (it changed, or
    the toolbox disagrees with itself): a failed attempt, and compare again."""


CHANGED = "the files changed while they were read (the listing and the download disagree)"


# The compare's own words when it could not see the workspace (docs/rules.md, proof).
ROOT_NOT_FOUND = "workspace root not found"


class WorkspaceRootNotFound(Exception):
    """The compare could not see the workspace: it proves nothing and is retried."""


def blind_spot(digests: dict[str, FileDigest] | None, manifest: dict, root: str) -> str:
    """Why a compare saw nothing it can vouch for, or "" when it saw the workspace.

    A compare proves nothing about files it could not see (docs/rules.md, proof): the root
    is missing, or the saved manifest names files and none of them is under the
    root (a lease without `metadata.remoteCwd` fell back to an environment root
    that is empty, or holds something else). An empty root with an empty saved
    manifest is a real, clean answer."""
    if digests is None:
        return f"the root {root!r} does not exist in the sandbox"
    if manifest and not any(path in digests for path in manifest):
        return (
            f"none of the {len(manifest)} saved file(s) is under {root!r} "
            f"({len(digests)} other file(s) found there)"
        )
    return ""


def blind_payload(root: str, detail: str, digests: dict | None, manifest: dict) -> dict:
    """A compare receipt that shows what the compare could not see; never clean."""
    return {
        "clean": False,
        "root_not_found": True,
        "error": ROOT_NOT_FOUND,
        "detail": detail,
        "root": root,
        "found_files": len(digests or {}),
        "saved_files": len(manifest),
    }


@dataclass(frozen=True)
class Diff:
    added: list[dict]
    changed: list[dict]
    deleted: list[str]
    total_bytes: int
    listing_digest: str

    @property
    def clean(self) -> bool:
        return not (self.added or self.changed or self.deleted)

    def as_payload(self, root: str) -> dict:
        return {
            "clean": self.clean,
            "root": root,
            "added": self.added,
            "changed": self.changed,
            "deleted": self.deleted,
            "counts": {
                "added": len(self.added),
                "changed": len(self.changed),
                "deleted": len(self.deleted),
            },
            "bytes": self.total_bytes,
            "unsaved_bytes": sum(f["size"] for f in self.added + self.changed),
            "listing_digest": self.listing_digest,
        }


def diff_against_manifest(digests: dict[str, FileDigest], manifest: dict) -> Diff:
    """Pure: what the sandbox holds that the last durable save does not."""
    added, changed = [], []
    for path in sorted(digests):
        d = digests[path]
        entry = {"path": path, "sha256": d.sha256, "size": d.size}
        saved = manifest.get(path)
        if saved is None:
            added.append(entry)
        elif saved.get("sha256") != d.sha256:
            changed.append(entry)
    deleted = sorted(p for p in manifest if p not in digests)
    listing = hashlib.sha256()
    for path in sorted(digests):
        listing.update(f"{path}\0{digests[path].sha256}\0{digests[path].size}\n".encode())
    return Diff(
        added=added,
        changed=changed,
        deleted=deleted,
        total_bytes=sum(d.size for d in digests.values()),
        listing_digest=listing.hexdigest(),
    )


def _spooled_sha(chunks: Iterable[bytes], spool) -> tuple[str, int]:
    sha, size = hashlib.sha256(), 0
    for chunk in chunks:
        sha.update(chunk)
        size += len(chunk)
        spool.write(chunk)
    return sha.hexdigest(), size


def changed_words(shown: str, listed: tuple[str, int | None], downloaded: tuple[str, int]) -> str:
    """The error of a download that does not match its listing, in words."""

    def one(sha: str, size: int | None) -> str:
        return f"sha256 {sha[:12]}…" + ("" if size is None else f" ({size} bytes)")

    return f"{CHANGED}: {shown} listed {one(*listed)}, downloaded {one(*downloaded)}"


def store_verified(
    expected_sha: str,
    chunks: Iterable[bytes],
    *,
    shown: str = "a file",
    listed_size: int | None = None,
) -> tuple[str, int]:
    """Store one file content-addressed; return (storage name, size) only after
    the stored bytes were read back and hash to `expected_sha`. `shown` names the
    file in errors (root/path). A failed write leaves nothing at the name
    (sandboxes/content_store.py)."""
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        digest, size = _spooled_sha(chunks, spool)
        if digest != expected_sha:
            raise StaleCompare(changed_words(shown, (expected_sha, listed_size), (digest, size)))
        name = Attachment.storage_name(digest)
        try:
            content_store.put_verified(default_storage, name, spool, digest, size)
        except content_store.StoreError as exc:
            raise ExportError(f"{shown}: {exc}") from exc
        except OSError as exc:
            raise ExportError(f"could not store {shown}: {exc}; nothing was kept") from exc
    return name, size


def where_stored(name: str = "") -> dict:
    """The backend, endpoint, bucket and key salvaged bytes are kept under; with
    no name, the store itself (what an export receipt names)."""
    found = object_storage.describe(default_storage, name)
    return found if name else {k: v for k, v in found.items() if k != "key"}


def export_files(
    opened: Iterator[tuple[str, Iterator[bytes]]], expected: dict[str, dict], root: str = ""
) -> list[dict]:
    """Store every opened file; each entry: path, size, sha256, storage name, and
    where it is (backend, endpoint, bucket, key).
    `root` only names the files in errors."""
    exported = []
    for path, chunks in opened:
        want = expected[path]
        shown = f"{root}/{path}" if root else path
        name, size = store_verified(
            want["sha256"], chunks, shown=shown, listed_size=want.get("size")
        )
        exported.append(
            {
                "path": path,
                "size": size,
                "sha256": want["sha256"],
                "storage": name,
                **where_stored(name),
            }
        )
    missing = set(expected) - {f["path"] for f in exported}
    if missing:
        raise ExportError(f"provider did not return {len(missing)} file(s): {sorted(missing)[:5]}")
    return exported
