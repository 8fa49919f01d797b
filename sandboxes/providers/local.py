"""The embedded provider: sandboxes are directories on this machine
(docs/architecture.md, the rooms).

Layout: `<root>/<sandbox id>/state.json` and `<root>/<sandbox id>/fs/…`. State
changes are atomic file replacements; nothing here ever reads or writes a path
that resolves outside the sandbox's `fs/` tree.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

from sandboxes.providers.base import (
    Confirmation,
    FileDigest,
    ProviderError,
    ProviderProtocolError,
    Resources,
    RetryingProvider,
    RootNotFound,
    SandboxInfo,
    SandboxNotFound,
    SandboxState,
    UnsafePath,
    _setting,
    check_relative_path,
    new_request_id,
    observed,
    utcnow,
)

CHUNK_SIZE = 64 * 1024
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_TARGETS = {
    "start": SandboxState.STARTED,
    "stop": SandboxState.STOPPED,
    "archive": SandboxState.ARCHIVED,
}


def _size(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class LocalProvider(RetryingProvider):
    name = "local"

    def __init__(self, root: str | os.PathLike | None = None, **kwargs):
        super().__init__(**kwargs)
        if root is None:
            root = _setting("LOCAL_SANDBOX_ROOT", Path("var/sandboxes"))
        self.root = Path(root)
        self._lock = threading.Lock()

    def __repr__(self):
        return f"<LocalProvider {self.root}>"

    # --- layout ------------------------------------------------------------

    def _dir(self, sandbox_id: str, operation: str) -> Path:
        if not isinstance(sandbox_id, str) or not _ID.match(sandbox_id):
            raise UnsafePath(
                f"refused sandbox id {sandbox_id!r}", operation=operation, sandbox_id=sandbox_id
            )
        return self.root / sandbox_id

    def _read_state(self, sandbox_id: str, operation: str) -> dict | None:
        path = self._dir(sandbox_id, operation) / "state.json"
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise ProviderProtocolError(
                f"unreadable {path}: {exc}", operation=operation, sandbox_id=sandbox_id
            ) from exc
        if not isinstance(data, dict):
            raise ProviderProtocolError(
                f"unreadable {path}", operation=operation, sandbox_id=sandbox_id
            )
        return data

    def _write_state(self, sandbox_id: str, data: dict) -> None:
        path = self._dir(sandbox_id, "write") / "state.json"
        _atomic_write(path, json.dumps(data, indent=2, sort_keys=True).encode())

    def _info(self, data: dict, *, measure: bool = False) -> SandboxInfo:
        return SandboxInfo(
            id=data["id"],
            name=data.get("name") or data["id"],
            state=SandboxState.parse(data.get("state")),
            labels=dict(data.get("labels") or {}),
            toolbox_proxy_url=None,
            raw=data,
            resources=self._measure(data) if measure else None,
        )

    def _measure(self, data: dict) -> Resources:
        """The disk a local sandbox really uses (allocated blocks of its files,
        symlinks not followed), and the cpu and memory it was created with
        (declared, as Daytona reports a sandbox's `cpu` and `memory`; unknown
        when it was created without them)."""
        sandbox_id = data["id"]
        used = 0
        for dirpath, _dirs, files in os.walk(self._fs(sandbox_id, "get")):
            for name in files:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue  # removed while we walked
                used += st.st_blocks * 512
        return Resources(
            cpu=_size(data.get("cpu")),
            memory_gib=_size(data.get("memory_gib")),
            disk_gib=used / 2**30,
        )

    def _fs(self, sandbox_id: str, operation: str) -> Path:
        return self._dir(sandbox_id, operation) / "fs"

    def _resolve_inside(self, base: Path, rel: str, operation: str, sandbox_id: str) -> Path:
        """Resolve `base/rel` following symlinks and refuse anything outside `base`."""
        clean = check_relative_path(rel, operation=operation, sandbox_id=sandbox_id)
        base_real = base.resolve()
        target = (base / clean).resolve()
        if target != base_real and not target.is_relative_to(base_real):
            raise UnsafePath(
                f"refused {rel!r}: it resolves outside the sandbox",
                operation=operation,
                sandbox_id=sandbox_id,
            )
        return target

    def _root_dir(self, sandbox_id: str, root: str, operation: str) -> Path:
        fs = self._fs(sandbox_id, operation)
        path = self._resolve_inside(fs, root, operation, sandbox_id)
        if not path.is_dir():
            raise RootNotFound(
                f"workspace root {root!r} not found in {sandbox_id}",
                operation=operation,
                sandbox_id=sandbox_id,
            )
        return path

    # --- reads ---------------------------------------------------------------

    def get(self, sandbox_id: str, **_) -> SandboxInfo:
        with observed(self.name, "get"):
            data = self._read_state(sandbox_id, "get")
            if data is None:
                return SandboxInfo(sandbox_id, sandbox_id, SandboxState.DESTROYED, {}, None, {})
            return self._info(data, measure=True)

    def list(self, labels: dict[str, str] | None = None, **_) -> Iterator[SandboxInfo]:
        with observed(self.name, "list"):
            if not self.root.is_dir():
                return
            for entry in sorted(self.root.iterdir()):
                if not _ID.match(entry.name) or not entry.is_dir():
                    continue
                data = self._read_state(entry.name, "list")
                if data is None:
                    continue
                info = self._info(data)
                if all(info.labels.get(k) == v for k, v in (labels or {}).items()):
                    yield info

    # --- lifecycle ---------------------------------------------------------

    def _transition(self, action: str, sandbox_id: str) -> Confirmation:
        with observed(self.name, action), self._lock:
            request_id = new_request_id()
            data = self._read_state(sandbox_id, action)
            if data is None:
                raise SandboxNotFound(
                    f"cannot {action} {sandbox_id}: the sandbox is gone",
                    operation=action,
                    sandbox_id=sandbox_id,
                    status_code=404,
                )
            state = SandboxState.parse(data.get("state"))
            target = _TARGETS[action]
            if action == "stop" and state == SandboxState.ARCHIVED:
                target = state  # archived is already not running
            elif action == "start" and state in (SandboxState.ERROR, SandboxState.BUILD_FAILED):
                raise ProviderError(
                    f"cannot start {sandbox_id}: it is in state {state}",
                    operation=action,
                    sandbox_id=sandbox_id,
                )
            if state != target:
                data["state"] = str(target)
                data["updated_at"] = utcnow().isoformat()
                self._write_state(sandbox_id, data)
            return self._confirmation(sandbox_id, target, request_id, action)

    def start(self, sandbox_id: str, **_) -> Confirmation:
        return self._transition("start", sandbox_id)

    def stop(self, sandbox_id: str, **_) -> Confirmation:
        return self._transition("stop", sandbox_id)

    def archive(self, sandbox_id: str, **_) -> Confirmation:
        return self._transition("archive", sandbox_id)

    def destroy(self, sandbox_id: str, **_) -> Confirmation:
        """Idempotent; renames the directory away first so a crash never leaves half a sandbox."""
        with observed(self.name, "destroy"), self._lock:
            request_id = new_request_id()
            directory = self._dir(sandbox_id, "destroy")
            if directory.exists():
                tomb = self.root / f".destroying-{sandbox_id}-{uuid.uuid4().hex}"
                os.replace(directory, tomb)
                shutil.rmtree(tomb)
            if self._read_state(sandbox_id, "destroy") is not None:
                raise ProviderError(
                    f"{sandbox_id} still exists after destroy",
                    operation="destroy",
                    sandbox_id=sandbox_id,
                )
            return self._confirmation(sandbox_id, SandboxState.DESTROYED, request_id, "destroy")

    def create(
        self,
        name: str,
        labels: dict,
        files: dict[str, bytes] | None = None,
        root: str = "workspace",
        cpu: float | None = None,
        memory_gib: float | None = None,
        **_,
    ) -> SandboxInfo:
        with observed(self.name, "create"):
            sandbox_id = str(uuid.uuid4())
            fs = self._fs(sandbox_id, "create")
            workspace = fs / check_relative_path(root, operation="create")
            workspace.mkdir(parents=True)
            for rel, data in (files or {}).items():
                target = workspace / check_relative_path(rel, operation="create")
                target.parent.mkdir(parents=True, exist_ok=True)
                _atomic_write(target, data)
            now = utcnow().isoformat()
            state: dict[str, object] = {
                "id": sandbox_id,
                "name": name or sandbox_id,
                "labels": {str(k): str(v) for k, v in (labels or {}).items()},
                "state": str(SandboxState.STARTED),
                "created_at": now,
                "updated_at": now,
            }
            # Declared sizes, reported back by every read (what a kept sandbox costs).
            state |= {k: v for k, v in (("cpu", cpu), ("memory_gib", memory_gib)) if v is not None}
            self._write_state(sandbox_id, state)
            return self._info(state)

    # --- files ---------------------------------------------------------------

    def _ensure_started(self, sandbox_id: str, operation: str) -> None:
        info = self.get(sandbox_id)
        if info.state == SandboxState.DESTROYED:
            raise SandboxNotFound(
                f"cannot {operation} {sandbox_id}: the sandbox is gone",
                operation=operation,
                sandbox_id=sandbox_id,
                status_code=404,
            )
        if info.state != SandboxState.STARTED:
            self.start(sandbox_id)

    def hash_files(self, sandbox_id: str, root: str, **_) -> dict[str, FileDigest]:
        """Every regular file under root; symlinks are not followed (like `find -type f`)."""
        with observed(self.name, "hash_files"):
            self._ensure_started(sandbox_id, "hash_files")
            base = self._root_dir(sandbox_id, root, "hash_files")
            digests: dict[str, FileDigest] = {}
            stack = [base]
            while stack:
                directory = stack.pop()
                with os.scandir(directory) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        elif entry.is_file(follow_symlinks=False):
                            rel = Path(entry.path).relative_to(base).as_posix()
                            sha, size = hashlib.sha256(), 0
                            for chunk in self._read(Path(entry.path)):
                                sha.update(chunk)
                                size += len(chunk)
                            digests[rel] = FileDigest(rel, sha.hexdigest(), size)
            return digests

    def _read(self, path: Path) -> Iterator[bytes]:
        # O_NOFOLLOW: the last component cannot be swapped for a symlink after checks.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise UnsafePath(f"{path.name!r} is not a regular file")
            while chunk := handle.read(CHUNK_SIZE):
                yield chunk

    def open_files(
        self, sandbox_id: str, root: str, paths: builtins.list[str], **_
    ) -> Iterator[tuple[str, Iterator[bytes]]]:
        with observed(self.name, "open_files"):
            # Refuse every unsafe path before reading anything.
            clean = [
                check_relative_path(p, operation="open_files", sandbox_id=sandbox_id) for p in paths
            ]
            self._ensure_started(sandbox_id, "open_files")
            base = self._root_dir(sandbox_id, root, "open_files")
            targets = [(p, self._resolve_inside(base, p, "open_files", sandbox_id)) for p in clean]
            for rel, target in targets:
                if not target.is_file():
                    raise ProviderError(
                        f"cannot read {rel!r} in {sandbox_id}: not a regular file",
                        operation="open_files",
                        sandbox_id=sandbox_id,
                        status_code=404,
                    )
                yield rel, self._read(target)
