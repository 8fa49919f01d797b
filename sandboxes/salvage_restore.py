"""Writing a salvage back under a folder, from the store or from a downloaded
salvage.zip (docs/architecture.md, restore a salvage): every path checked to stay
inside the folder, every file hashed, nothing overwritten that differs unless
forced, and nothing written at all when something is refused.

Files are first written and verified in a staging folder inside the target
(the same filesystem), then renamed into place; a file that does not hash to
what its export recorded, or a path refused, leaves the target as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sandboxes import salvage_archive
from sandboxes.rules.restore import Chosen, choose, path_problem, pick_export

CHUNK = salvage_archive.CHUNK


class RestoreRefused(Exception):
    """The restore would leave the folder, overwrite work, or write bytes that do
    not verify: nothing was written. `problems` names each."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Source:
    """One file to write: its path under the folder, what it must hash to, and
    how to read its bytes."""

    path: str
    sha256: str
    size: int
    open: Callable[[], IO[bytes]]
    export: str


@dataclass
class Restored:
    written: list[Source] = field(default_factory=list)
    overwritten: list[Source] = field(default_factory=list)
    unchanged: list[Source] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    exports: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self.written + self.overwritten)


@dataclass(frozen=True)
class Selection:
    sandbox: dict
    exports: list[str]
    sources: list[Source]
    deleted: list[str]


def _chosen(exports: list[dict], wanted: str | None) -> tuple[Chosen, list[str]]:
    ids = [str(x["id"]) for x in exports]
    if wanted is None:
        return choose(exports), ids
    picked, why = pick_export(ids, wanted)
    if picked is None:
        raise RestoreRefused([why])
    return choose(exports, only=picked), [picked]


def from_store(r, wanted: str | None = None) -> Selection:
    """The latest version of each path across the sandbox's verified exports (or
    the one export `wanted` names), read from the store."""
    salvage = salvage_archive.salvage_of(r)
    if salvage.malformed:
        raise RestoreRefused(salvage.malformed)
    storage = salvage_archive.salvage_storage()
    exports = [
        {
            "id": str(x.pk),
            "files": [f.__dict__ for f in salvage.files if f.export == str(x.pk)],
            "deleted": (x.payload or {}).get("deleted") or [],
        }
        for x in salvage.exports
    ]
    chosen, ids = _chosen(exports, wanted)
    sources = [
        Source(
            path=e["path"],
            sha256=e["sha256"],
            size=e["size"],
            open=lambda name=e["storage"]: storage.open(name, "rb"),
            export=e["export"],
        )
        for e in chosen.files
    ]
    sandbox = {"provider": r.provider, "id": r.provider_lease_id}
    return Selection(sandbox=sandbox, exports=ids, sources=sources, deleted=chosen.deleted)


def from_zip(archive: zipfile.ZipFile, wanted: str | None = None) -> Selection:
    """The same choice, from a salvage.zip's MANIFEST.json and members."""
    try:
        manifest = json.loads(archive.read(salvage_archive.MANIFEST))
        receipts, files = manifest["receipts"], manifest["files"]
        sandbox = manifest["sandbox"]
    except KeyError as exc:
        raise RestoreRefused(
            [f"the zip has no {salvage_archive.MANIFEST} or it lacks {exc}"]
        ) from None
    except (ValueError, TypeError) as exc:
        raise RestoreRefused([f"{salvage_archive.MANIFEST} is not valid JSON: {exc}"]) from None
    names = set(archive.namelist())
    shape = (("path", str), ("sha256", str), ("size", int), ("export", str), ("zip_path", str))
    bad = [
        f"{salvage_archive.MANIFEST}: file entry {i} lacks {key} ({kind.__name__})"
        for i, f in enumerate(files)
        for key, kind in shape
        if not isinstance(f, dict) or not isinstance(f.get(key), kind)
    ]
    if bad or not isinstance(receipts, list) or not isinstance(sandbox, dict):
        raise RestoreRefused(bad or [f"{salvage_archive.MANIFEST} is not a salvage manifest"])
    exports = [
        {
            "id": str(x["id"]),
            "files": [f for f in files if f.get("export") == str(x["id"])],
            "deleted": x.get("deleted") or [],
        }
        for x in receipts
    ]
    chosen, ids = _chosen(exports, wanted)
    missing = [e["zip_path"] for e in chosen.files if e.get("zip_path") not in names]
    if missing:
        raise RestoreRefused(
            [f"the zip lacks {name}, which its manifest lists" for name in missing]
        )
    sources = [
        Source(
            path=e["path"],
            sha256=e["sha256"],
            size=e["size"],
            open=lambda member=e["zip_path"]: archive.open(member),
            export=e["export"],
        )
        for e in chosen.files
    ]
    return Selection(sandbox=sandbox, exports=ids, sources=sources, deleted=chosen.deleted)


# --- writing ---------------------------------------------------------------------------


def _sha_of(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def _inside(root: Path, path: str) -> str:
    """Why writing `path` under `root` would land outside it ("" if it would
    not): a symlink inside the folder, on the way or at the file, pointing out."""
    target = root / path
    resolved = target.resolve()
    if not resolved.is_relative_to(root):
        return f"{path!r} leads outside the folder through a symlink (to {resolved})"
    if target.is_symlink():
        return f"{path!r} is a symlink in the folder; remove it first"
    return ""


def check(root: Path, sources: list[Source], force: bool) -> tuple[list[str], Restored]:
    """Every problem with writing `sources` under `root` (resolved), and what
    would be written, overwritten or left unchanged."""
    found, plan = [], Restored()
    for s in sources:
        why = path_problem(s.path)
        if why:
            found.append(f"{s.path!r} {why}; refused")
            continue
        if why := _inside(root, s.path):
            found.append(why)
            continue
        target = root / s.path
        if target.is_dir():
            found.append(f"{s.path!r} is a folder in {root}; refused")
        elif target.exists():
            if _sha_of(target) == s.sha256:
                plan.unchanged.append(s)
            elif force:
                plan.overwritten.append(s)
            else:
                found.append(
                    f"{s.path!r} exists in {root} with other content; --force overwrites it"
                )
        else:
            plan.written.append(s)
    return found, plan


def _stage(staging: Path, index: int, s: Source) -> Path:
    temp = staging / str(index)
    sha, size = hashlib.sha256(), 0
    try:
        with s.open() as src, open(temp, "xb") as out:
            while chunk := src.read(CHUNK):
                sha.update(chunk)
                size += len(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    except FileNotFoundError:
        raise RestoreRefused(
            [f"{s.path} (export {s.export}): its stored object is missing; nothing was written"]
        ) from None
    except zipfile.BadZipFile as exc:
        raise RestoreRefused(
            [
                f"{s.path} (export {s.export}): the zip member is damaged ({exc}); "
                "nothing was written"
            ]
        ) from None
    if (sha.hexdigest(), size) != (s.sha256, s.size):
        raise RestoreRefused(
            [
                f"{s.path} (export {s.export}) does not hash to what its export recorded "
                f"(sha256 {sha.hexdigest()[:12]}…, {size} bytes; recorded {s.sha256[:12]}…, "
                f"{s.size} bytes); nothing was written"
            ]
        )
    os.chmod(temp, 0o644)
    return temp


def restore(selection: Selection, folder: Path, *, force: bool = False) -> Restored:
    """Write the selection under `folder` (created if missing), or raise
    RestoreRefused having written nothing."""
    if folder.exists() and not folder.is_dir():
        raise RestoreRefused([f"{folder} is not a folder"])
    root = folder.resolve()
    found, plan = check(root, selection.sources, force)
    if found:
        raise RestoreRefused(found)
    root.mkdir(parents=True, exist_ok=True)
    plan.deleted, plan.exports = list(selection.deleted), list(selection.exports)
    todo = plan.written + plan.overwritten
    staging = root / f".restore-salvage-{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        staged = [(s, _stage(staging, i, s)) for i, s in enumerate(todo)]
        for s, temp in staged:
            if why := _inside(root, s.path):  # again: the folder may have changed meanwhile
                raise RestoreRefused([why])
            (root / s.path).parent.mkdir(parents=True, exist_ok=True)
            os.replace(temp, root / s.path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return plan
