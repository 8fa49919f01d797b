"""Restoring a salvage, over plain data: which salvaged paths may be written under a
folder, and which version of each path a restore writes (docs/architecture.md,
restore a salvage). The archive and the command both ask these."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


def path_problem(path: object) -> str:
    """Why `path` may not be written under a folder, or "" when it may: a plain
    relative path of named segments ("src/app.py"). What a sandbox or a zip
    names is not trusted: an absolute path, a `..` or an empty or `.` segment
    could leave the folder or name something else than it seems."""
    if not isinstance(path, str) or not path:
        return "is empty"
    if "\x00" in path:
        return "contains a NUL character"
    if path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        return "is absolute"
    segments = path.split("/")
    if ".." in segments or ".." in path.split("\\"):
        return "leaves the folder (..)"
    if any(s in ("", ".") for s in segments):
        return "has an empty or '.' segment"
    return ""


@dataclass(frozen=True)
class Chosen:
    """What a restore writes: one entry per path (the export's own file entry,
    with `export` naming it), and the paths the chosen exports list as deleted."""

    files: list[dict] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def choose(exports: Iterable[Mapping], only: str | None = None) -> Chosen:
    """The latest version of each path across `exports` (each `{"id", "files":
    [{"path", …}], "deleted": [path]}`, oldest first), or exactly the export
    whose id is `only`. A path the latest export mentioning it lists as
    deleted is not written: it was gone from the sandbox then."""
    latest: dict[str, dict | None] = {}
    for export in exports:
        if only is not None and str(export["id"]) != only:
            continue
        for entry in export.get("files") or []:
            latest[entry["path"]] = {**entry, "export": str(export["id"])}
        for path in export.get("deleted") or []:
            latest[path] = None
    files = [entry for p in sorted(latest) if (entry := latest[p]) is not None]
    deleted = sorted(p for p, entry in latest.items() if entry is None)
    return Chosen(files=files, deleted=deleted)


def pick_export(ids: Iterable[str], wanted: str) -> tuple[str | None, str]:
    """The export id `wanted` names (the whole id, or a prefix of at least 8
    characters that only one export starts with), and "" — or None and why not."""
    ids = list(ids)
    wanted = wanted.strip().lower()
    if wanted in ids:
        return wanted, ""
    if len(wanted) < 8:
        return None, f"--export {wanted!r}: give the export's id (at least 8 characters)"
    matches = [i for i in ids if i.startswith(wanted)]
    if len(matches) == 1:
        return matches[0], ""
    if not matches:
        known = ", ".join(i[:8] for i in ids) or "none"
        return (
            None,
            f"--export {wanted!r}: no export of this sandbox has that id (exports: {known})",
        )
    return None, f"--export {wanted!r}: {len(matches)} exports start with it; give more of the id"
