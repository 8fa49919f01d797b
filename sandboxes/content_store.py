"""The content-addressed store of salvaged bytes: a name holds exactly the bytes
its sha256 names, or nothing (docs/rules.md, proof).

`put_verified` is the one write. An object already at the name is trusted only
if it hashes to its name; one that does not (a write cut by a full disk, a
crash, a tampered file) is replaced, never skipped. On a local filesystem the
bytes go to a temporary name beside the final one (unique per writer), are
fsynced and re-read, and only then renamed over the name, so no failure leaves
a partial object where a verified one is expected. A storage backend without
local files may bring its own `put_verified(name, content, sha256, size)` (an
S3 bucket's: sandboxes/object_storage.py);
otherwise its `save` must be atomic (an object appears whole or not at all),
as object stores' uploads are. Whatever wrote it, the name is read back and
verified before the caller may count it as proof.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import uuid
from pathlib import Path
from typing import IO

from django.core.files import File
from django.core.files.storage import FileSystemStorage, Storage

CHUNK = 1024 * 1024
# A temporary file this old beside the name was left by a writer that died.
ABANDONED_SECONDS = 3600


class StoreError(Exception):
    """The bytes could not be stored, or what is stored does not verify."""


def digest_of(storage: Storage, name: str) -> tuple[str, int] | None:
    """(sha256, size) of what is stored at `name`, or None when nothing is."""
    sha, size = hashlib.sha256(), 0
    try:
        handle = storage.open(name, "rb")
    except FileNotFoundError:
        return None
    with handle:
        while chunk := handle.read(CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return sha.hexdigest(), size


def put_verified(storage: Storage, name: str, content: IO[bytes], sha256: str, size: int) -> None:
    """Make `name` hold exactly `content` (seekable; `sha256`, `size`), read back
    and verified, or raise StoreError or the storage's OSError. On a local
    filesystem a failure leaves the name as it was; whatever is left there that
    does not verify, the next call replaces."""
    want = (sha256, size)
    if digest_of(storage, name) == want:
        return  # the same content, already stored whole
    content.seek(0)
    own = getattr(storage, "put_verified", None)
    if callable(own):
        own(name, content, sha256, size)
    elif (path := _local_path(storage, name)) is not None:
        _replace_local(storage, path, content, want)
    else:
        _replace_remote(storage, name, content)
    stored = digest_of(storage, name)
    if stored != want:
        raise StoreError(f"stored bytes for {name} do not verify ({_shown(stored)})")


def _shown(digest: tuple[str, int] | None) -> str:
    if digest is None:
        return "nothing stored"
    return f"sha256 {digest[0][:12]}…, {digest[1]} bytes"


def _local_path(storage: Storage, name: str) -> Path | None:
    """Where a filesystem storage keeps `name`; None for any other backend (some,
    like InMemoryStorage, answer .path() without keeping anything there)."""
    if isinstance(storage, FileSystemStorage):
        return Path(storage.path(name))
    return None


def _replace_local(storage: Storage, final: Path, content: IO[bytes], want) -> None:
    """Write beside `final`, fsync, verify the written bytes, rename over `final`."""
    _make_dirs(storage, final.parent)
    _sweep_abandoned(final)
    temp = final.with_name(f"{final.name}.tmp-{uuid.uuid4().hex}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        with os.fdopen(fd, "wb") as out:
            while chunk := content.read(CHUNK):
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        mode = getattr(storage, "file_permissions_mode", None)
        if mode is not None:
            os.chmod(temp, mode)
        written = _file_digest(temp)
        if written != want:
            raise StoreError(f"written bytes for {final.name} do not verify ({_shown(written)})")
        os.replace(temp, final)  # atomic: the name holds the old object or the new one
        _fsync_dir(final.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def _replace_remote(storage: Storage, name: str, content: IO[bytes]) -> None:
    """A backend without local files: what does not verify is deleted, then saved."""
    if storage.exists(name):
        storage.delete(name)
    saved = storage.save(name, File(content, name=name.rsplit("/", 1)[-1]))
    if saved != name:
        # Another writer stored it between our delete and our save: ours is a copy.
        storage.delete(saved)


def _file_digest(path: Path) -> tuple[str, int]:
    sha, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return sha.hexdigest(), size


def _make_dirs(storage: Storage, directory: Path) -> None:
    mode = getattr(storage, "directory_permissions_mode", None)
    if mode is None:
        os.makedirs(directory, exist_ok=True)
        return
    old = os.umask(0o777 & ~mode)  # as FileSystemStorage does: the mode, not the umask's
    try:
        os.makedirs(directory, mode, exist_ok=True)
    finally:
        os.umask(old)


def _fsync_dir(directory: Path) -> None:
    """The rename itself survives a power cut (best effort: not every OS allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _sweep_abandoned(final: Path) -> None:
    """Temporary files of this name left by writers that died (SIGKILL mid-write)."""
    cutoff = time.time() - ABANDONED_SECONDS
    for leftover in final.parent.glob(f"{final.name}.tmp-*"):
        with contextlib.suppress(OSError):
            if leftover.stat().st_mtime < cutoff:
                leftover.unlink()
